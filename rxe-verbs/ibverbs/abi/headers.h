/* What ../sys/src/sys.rs (crate rxe-ibverbs-sys) is generated from (abi/bindgen.sh). */
#include <infiniband/verbs.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
