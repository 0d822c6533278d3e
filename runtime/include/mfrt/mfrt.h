/*===- mfrt.h - the meshfold runtime C ABI ----------------------*- C -*-===*\
|*                                                                          *|
|* The one header of the runtime's C ABI: everything generated code calls  *|
|* to cross a device boundary. Names and signatures are stable.            *|
|*                                                                          *|
|* Model: an SPMD program runs on every rank of a plan (the devices). A    *|
|* backend runs the ranks: `local` (every rank a thread of this process,   *|
|* a simulated cluster with the plan's node topology), `mpi` (one process  *|
|* per rank under mpirun), `tcp` (one process per rank over sockets,       *|
|* started by srun or any launcher, joined by a rendezvous), `nccl` (one   *|
|* process per GPU, NCCL communicators bootstrapped over MPI or a          *|
|* rendezvous). Groups are made from mesh axes by MeshLayout.              *|
|* Every call is made by the calling rank (thread) for itself.             *|
|*                                                                          *|
|* Errors: every function returns an mfrt_status. A failure on one rank    *|
|* (an error, a timeout, a dead peer) is reported by every rank that       *|
|* waits on it within the timeout, naming the rank, the op and the group;  *|
|* mfrt_last_error() gives the message.                                    *|
|*                                                                          *|
|* Implementation notes (mfrt/comm/Comm.h has the design):                  *|
|*  - A failure anywhere aborts the launch: every rank's blocked or later  *|
|*    call fails with MFRT_ERR_PEER ("... rank R failed: <its message>");  *|
|*    a rank's own failure also fails its later calls (MFRT_ERR_STATE).    *|
|*    Argument errors of a collective count as failures (the peers would   *|
|*    otherwise wait for the call forever).                                *|
|*  - `mpi` and `nccl` are plugins, libmfrt_mpi.so and libmfrt_nccl.so,    *|
|*    that mfrt_launch loads with dlopen from $MFRT_PLUGIN_DIR, the         *|
|*    executable's directory or its ../lib, the build's lib directory, or  *|
|*    the loader path; executables link only libmfrt.a. One mfrt_launch    *|
|*    per process for these backends (MPI cannot be initialized twice).    *|
|*  - `nccl`: buffers are device pointers; dispatch's experts and weights  *|
|*    may be host or device memory; mfrt_dispatch_rows is device memory,  *|
|*    mfrt_dispatch_experts host memory; mfrt_send returns once received.  *|
|*  - MFRT_FAULT_EXIT="<rank>:<op>" (testing): that rank calls _exit(3)    *|
|*    inside the named op (e.g. all_gather) after posting its messages.    *|
\*===----------------------------------------------------------------------===*/

#ifndef MFRT_MFRT_H
#define MFRT_MFRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mfrt_status {
  MFRT_OK = 0,
  MFRT_ERR_ARGUMENT = 1, /* bad argument (group, count, dtype, ...) */
  MFRT_ERR_TIMEOUT = 2,  /* a peer did not arrive within the timeout */
  MFRT_ERR_PEER = 3,     /* a peer failed or exited */
  MFRT_ERR_BACKEND = 4,  /* MPI / NCCL / CUDA reported an error */
  MFRT_ERR_STATE = 5     /* called outside mfrt_launch, or after a failure */
} mfrt_status;

typedef enum mfrt_dtype {
  MFRT_F32 = 0,
  MFRT_BF16 = 1,
  MFRT_F16 = 2
} mfrt_dtype;

typedef enum mfrt_backend {
  MFRT_BACKEND_LOCAL = 0,
  MFRT_BACKEND_MPI = 1,
  MFRT_BACKEND_NCCL = 2,
  MFRT_BACKEND_TCP = 3
} mfrt_backend;

/* What a collective is, for the byte accounting (docs/design.md §5 table). */
typedef enum mfrt_op_kind {
  MFRT_OP_ALL_GATHER = 0,
  MFRT_OP_REDUCE_SCATTER = 1,
  MFRT_OP_KV_RING = 2,
  MFRT_OP_DISPATCH = 3,
  MFRT_OP_COMBINE = 4,
  MFRT_OP_PP = 5,
  MFRT_OP_GATHER = 6, /* the LM-head halves */
  MFRT_OP_ALL_REDUCE = 7,
  MFRT_OP_BARRIER = 8,
  MFRT_OP_Q_RING = 9,       /* a decode step's queries and partial outputs */
  MFRT_OP_KV_TRANSFER = 10, /* a K/V cache from one pool to the other */
  MFRT_OP_KIND_COUNT = 11
} mfrt_op_kind;

typedef enum mfrt_link {
  MFRT_LINK_NVLINK = 0, /* same node */
  MFRT_LINK_IB = 1,     /* another node */
  MFRT_LINK_COUNT = 2
} mfrt_link;

typedef enum mfrt_dispatch_mode {
  MFRT_DISPATCH_FLAT = 0, /* one all-to-all over the group */
  /* A token crosses to another node at most once per destination node, to
     the relay GPU with the sender's local index (same IB rail), which
     forwards it over NVLink; combine returns the reverse way and the relay
     sums its node's weighted expert outputs first (as DeepEP does; hop 4
     of docs/design.md §4). */
  MFRT_DISPATCH_HIERARCHICAL = 1
} mfrt_dispatch_mode;

typedef struct mfrt_options {
  mfrt_backend backend;
  /* The plan, as text, e.g. "devices=32 gpus_per_node=8
     attention=tp:2,cp:2,dp:4,pp:2 experts=ep:16:tp+cp+dp,pp:2:pp"
     (first axis fastest; an expert axis lists its attention parts with +).
     Optional "nvlink_gbps=450 ib_gbps=50". */
  const char *plan;
  /* Seconds a blocking call waits for its peers before failing; <= 0 means
     env MFRT_TIMEOUT_S if set, else MFRT_DEFAULT_TIMEOUT_S. The error text
     names the rank, the op and the group, e.g. "mfrt: rank 5: all_gather on
     group tp{4,5}: timed out after 2.0 s waiting for rank 4". */
  double timeout_s;
  /* Optional (NULL: none): the plan of a second pool of devices, e.g. a
     decode pool beside a prefill pool. The launch then runs both pools'
     devices, the first pool's ranks first, each pool on whole nodes of its
     own (its devices a multiple of gpus_per_node, which both plans give
     alike). A rank's groups, experts and link classes come from its own
     pool's plan; ranks are global (the second pool's start after the
     first's devices) everywhere in this API, and mfrt_transfer_send /
     mfrt_transfer_recv move data between the pools. */
  const char *second_plan;
  /* tcp, and nccl without mpirun: rank 0's "HOST:PORT", where the processes
     meet (NULL: env MFRT_RENDEZVOUS; nccl without either runs under
     mpirun). Rank 0 listens there; the others connect, retrying until the
     timeout. */
  const char *rendezvous;
  /* tcp / nccl with a rendezvous: this process's rank when has_rank is
     non-zero; otherwise srun's SLURM_PROCID (and SLURM_NTASKS, if set, must
     equal the plan's devices). A GPU's local rank is SLURM_LOCALID, else the
     rank's index among the ranks on its host. */
  int has_rank;
  int rank;
} mfrt_options;

#define MFRT_DEFAULT_TIMEOUT_S 60.0

/* Runs fn(user) once on every rank of the plan and returns when all ranks
   are done: local = one thread per rank; mpi/nccl = this process is the
   rank MPI gives it (the world size must equal the plan's devices);
   tcp = this process is the rank it was given (see rendezvous). Returns
   MFRT_OK only if every rank's fn returned 0 and no collective failed;
   otherwise the first failure (mfrt_last_error() has its message; a fn
   that returned N without a failed call: MFRT_ERR_PEER, "mfrt: rank R: fn
   returned N"). The plan text is parsed into a meshfold::PlanSpec and
   checked by MeshLayout::create (its error is returned as
   MFRT_ERR_ARGUMENT). For mpi / nccl, the ranks agree on the outcome at the
   end (a collective, bounded by the timeout), and after a failure MPI is
   not finalized (the process should exit non-zero). */
mfrt_status mfrt_launch(const mfrt_options *options, int (*fn)(void *user),
                        void *user);

/* The message of the calling thread's last failure ("" if none). */
const char *mfrt_last_error(void);

/* Inside mfrt_launch: the calling rank's pool (0, or 1 for the second
   plan's ranks; -1 outside) and the devices of pool `pool` (0 for a pool
   the launch does not have). The second pool's first global rank is
   mfrt_pool_size(0). */
int mfrt_pool(void);
int mfrt_pool_size(int pool);

/* Inside mfrt_launch: the calling rank and the world size (-1 and 0
   outside). Under mpi / nccl they keep this process's values after
   mfrt_launch returns (so that rank 0 can write the outputs). */
int mfrt_rank(void);
int mfrt_world_size(void);

/* Group of the calling rank along the comma-separated axes (attention or
   expert axis names, e.g. "tp", "cp", "tp,cp", "ep", "pp"), from MeshLayout.
   Members are ordered by their coordinate along the axes (first fastest).
   Returns a handle >= 0, or -1 (see mfrt_last_error). Collective: every
   rank must create the same groups in the same order. The same axes text
   gives the same handle again. At most 254 groups. */
int64_t mfrt_group(const char *axes);
int mfrt_group_size(int64_t group);
int mfrt_group_rank(int64_t group);
/* Global rank of member i of the group. */
int mfrt_group_member(int64_t group, int i);

/* Tags the calling rank's following traffic with a layer (-1: none). */
void mfrt_set_layer(int64_t layer);

/* Collectives over a group: every member calls them in the same order.
   The local and mpi backends use direct algorithms (each member exchanges
   its blocks with every other member), so the byte counters attribute each
   block to the link class of its real destination; nccl counts the same
   figures. */
/* recv[i*count .. (i+1)*count) = send of group member i. */
mfrt_status mfrt_all_gather(int64_t group, const void *send, void *recv,
                            int64_t count, mfrt_dtype dtype);
/* send has group_size*count elements; recv[count] = sum over members of
   their send[rank*count .. (rank+1)*count). fp32 accumulation, in group
   rank order (local / mpi), rounded once; recv may be send's own block. */
mfrt_status mfrt_reduce_scatter(int64_t group, const void *send, void *recv,
                                int64_t count, mfrt_dtype dtype);
/* recv[count] = sum over members of send[count]; bitwise identical on every
   member. recv may be send (in place). */
mfrt_status mfrt_all_reduce(int64_t group, const void *send, void *recv,
                            int64_t count, mfrt_dtype dtype);
/* One ring step over the group: K and V travel together as one message to
   group rank (r+1) % n; k_out/v_out receive those of rank (r-1+n) % n.
   k_out / v_out must not be k or v. */
mfrt_status mfrt_kv_ring_step(int64_t group, const void *k, const void *v,
                              void *k_out, void *v_out, int64_t count,
                              mfrt_dtype dtype);
/* The same ring step for one opaque buffer of `bytes` bytes (e.g. K, V and
   their positions packed together by the caller): one message, counted as
   MFRT_OP_KV_RING. recv must not be send. */
mfrt_status mfrt_ring_step_bytes(int64_t group, const void *send, void *recv,
                                 int64_t bytes);
/* The same ring step for a decode step's queries, partial outputs and
   their positions (pass-Q attention), counted as MFRT_OP_Q_RING. */
mfrt_status mfrt_q_ring_step_bytes(int64_t group, const void *send, void *recv,
                                   int64_t bytes);
/* Point to point between global ranks (pipeline stages), counted as
   MFRT_OP_PP. Sends to one peer are received in order. local / mpi:
   mfrt_send copies the data out and returns at once (a symmetric exchange
   cannot deadlock); nccl: it returns once the peer received it. */
mfrt_status mfrt_send(int peer, const void *buf, int64_t count,
                      mfrt_dtype dtype);
mfrt_status mfrt_recv(int peer, void *buf, int64_t count, mfrt_dtype dtype);
/* The same between global ranks of the two pools of a launch with a
   second plan (a K/V cache from the prefill pool to the decode pool),
   counted as MFRT_OP_KV_TRANSFER; the peer must be in the other pool. */
mfrt_status mfrt_transfer_send(int peer, const void *buf, int64_t count,
                               mfrt_dtype dtype);
mfrt_status mfrt_transfer_recv(int peer, void *buf, int64_t count,
                               mfrt_dtype dtype);
/* recv (on the group member `root` only) = concatenation by group rank. */
mfrt_status mfrt_gather(int64_t group, int root, const void *send, void *recv,
                        int64_t count, mfrt_dtype dtype);
mfrt_status mfrt_barrier(int64_t group);

/* MoE dispatch over an EP group. Token t of x [n_tokens, hidden] goes to the
   owners of its k experts experts[t*k + j] (expert e lives on group rank
   e / (n_experts / group_size); on a group along the expert mesh's "ep" it
   lives where MeshLayout::expertHolders places it: on an "etp,ep" group,
   each expert is held in ETP slices and the token goes to every slice, whose
   partial outputs combine sums) with its routing weight weights[t*k + j].
   Counts are exchanged inside the call. On return *h holds the rows this
   rank received: mfrt_dispatch_rows / mfrt_dispatch_experts describe them.
   Rows arrive ordered by (source group rank, source token, j), one row per
   (token, j) (a token choosing two experts of one rank arrives twice).
   n_tokens may be 0 (an idle replica still takes part). Both modes give the
   same rows and, from combine, bit-identical y; hierarchical uses
   MeshLayout::relay, and slots whose relay is not in the group go
   directly. */
typedef struct mfrt_dispatch mfrt_dispatch;
mfrt_status mfrt_dispatch_tokens(int64_t group, mfrt_dispatch_mode mode,
                                 const void *x, int64_t n_tokens,
                                 int64_t hidden, mfrt_dtype dtype,
                                 const int64_t *experts, const float *weights,
                                 int64_t k, int64_t n_experts,
                                 mfrt_dispatch **h);
/* As mfrt_dispatch_tokens, on a group along the expert mesh's "ep", with
   the experts placed by `placement` (meshfold::ExpertPlacement): n_slots =
   EP x slots per EP rank expert ids, slot s of EP coordinate c at
   placement[c * slots + s]. An expert in several slots has replicas: each
   of its rows goes to one of them, the replicas taking turns (from the
   calling rank's group index on), so that they split its rows. The local
   expert ids of received rows are slot indices (0 .. slots - 1).
   placement NULL: contiguous blocks, as mfrt_dispatch_tokens. */
mfrt_status mfrt_dispatch_tokens_placed(
    int64_t group, mfrt_dispatch_mode mode, const void *x, int64_t n_tokens,
    int64_t hidden, mfrt_dtype dtype, const int64_t *experts,
    const float *weights, int64_t k, int64_t n_experts,
    const int64_t *placement, int64_t n_slots, mfrt_dispatch **h);
/* Rows received: count, their data [count, hidden], and for each its expert
   index local to this rank (0 .. n_experts/group_size - 1, or the slot
   under a placement). */
int64_t mfrt_dispatch_count(const mfrt_dispatch *h);
const void *mfrt_dispatch_rows(const mfrt_dispatch *h);
const int64_t *mfrt_dispatch_experts(const mfrt_dispatch *h);
/* Returns expert outputs out [count, hidden] (row i for received row i) to
   the tokens' ranks: y[t] = sum_j weights[t*k+j] * out(row of (t, j)).
   Collective over the dispatch's group. Summation (both modes, so that they
   agree bit for bit): per destination node N in ascending order, the
   partial P_N = sum over j ascending with the expert on N of
   w * out, accumulated in fp32 and rounded to the dtype (what a relay
   sends back: one row), then y[t] = sum over N ascending of P_N in fp32,
   rounded once. Tokens with k = 0 get y = 0. Frees h (also on failure). */
mfrt_status mfrt_combine_tokens(mfrt_dispatch *h, const void *out, void *y);

/* Byte accounting: bytes the calling rank sent, by op kind, link class and
   layer (layer -1 = untagged; layers 0 .. MFRT_MAX_LAYERS-1). */
#define MFRT_MAX_LAYERS 256
uint64_t mfrt_bytes_sent(mfrt_op_kind kind, mfrt_link link, int64_t layer);
/* Same, summed over all layers and untagged traffic. */
uint64_t mfrt_bytes_sent_total(mfrt_op_kind kind, mfrt_link link);
void mfrt_reset_counters(void);
const char *mfrt_op_kind_name(mfrt_op_kind kind);

/* Token tracing (the executable's --trace-token): follows one token's data
   through the collectives by what they send. mfrt_trace_enable(1), before
   mfrt_launch, turns it on for the process. Before a collective, the
   program marks the rows of its send buffer that carry the traced token's
   data, mfrt_trace_mark(rows, n, row_elems) (rows of row_elems elements;
   for dispatch: token indices of x); the rank's next collective call takes
   the marks and records one hop per message that carries a marked row.
   Dispatch carries the mark with the rows to the relays and the experts'
   owners (a bit of the routing metadata, no extra bytes), and combine
   records the way back. A hop is keyed by (layer, op): the rank's last
   layer (mfrt_set_layer; calls after a layer keep its index) and the index
   of the collective call since the layer was set, so one program op has
   the same key on every rank. A transfer between pools
   (mfrt_transfer_send/recv) is none of the program's ops: it leaves the
   index as it is, and its hop has op 0. */
typedef struct mfrt_trace_hop {
  int64_t layer; /* -1: before the first layer */
  int64_t op;
  int32_t kind;     /* mfrt_op_kind */
  int32_t from, to; /* global ranks */
} mfrt_trace_hop;
void mfrt_trace_enable(int on);
void mfrt_trace_mark(const int64_t *rows, int64_t n, int64_t row_elems);
/* Starts the calling rank's hop keys afresh (layer -1, op 0): called before
   each request, so that ops before the first layer are keyed alike. */
void mfrt_trace_new_request(void);
/* Copies up to max of the hops this process's ranks recorded (in no
   particular order) and returns how many there are. */
int64_t mfrt_trace_hops(mfrt_trace_hop *out, int64_t max);
void mfrt_trace_clear(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MFRT_MFRT_H */
