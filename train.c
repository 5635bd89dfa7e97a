// train.c: the story of a training run, top to bottom.
//
//   ./train CONFIG.yml [key=value ...]   train (see ./train --help-config for the keys)
//   ./train prepare IN.txt OUT.bin       write a byte-level text as an llm.c token file
//   ./train sweep CONFIG.yml [key=value]  every optimization toggled: losses and memory (sweep/)
//   ./train describe CONFIG.yml [k=v ...] the model a config trains, as JSON (trainer/describe.h)
//   ./train --help-config                list every config key with its default
//   ./train CONFIG.yml dry_run=true      the memory plan of one step, nothing computed
//   ./train plot TRACE.csv OUT_DIR       draw a memory_trace as one SVG per device
//   ./train figure KIND OUT.svg ...      the figures of docs/ (sweep/figure.c)
//   ./train export-hf CKPT OUT_DIR [per-expert]   a checkpoint as a Hugging Face model (trainer/hf.h)
//   ./train hf-preset HF_DIR             a preset's model keys for a Hugging Face model
//
// A training run, in the order of the functions below (main, at the end, calls them):
// 1. read the config (preset file, then overrides) and check it, every path included;
// 2. start the mesh: one thread per device, each with its own allocator;
// 3. load the data, once, shared read-only by every device;
// 4. on every device: build the model, or resume it from a checkpoint;
// 5. loop: fetch the step's batch, train_step (forward + backward, clip, optimizer), log,
//    evaluate and save every so often;
// 6. evaluate, save, and print a sample of what the model learned;
// 7. report each device's memory (or, in a dry run, the plan of one step).
#include "core/common.h"        // die, MM_MAX
#include "kernels/kernels.h"    // kern_use_default: which kernels every device runs
#include "base/config.h"        // Config: the preset, overrides and their checks
#include "model/model.h"        // Model: the decoder stack
#include "trainer/step.h"       // train_step, step_init, eval_loss: one training step
#include "model/matmul.h"       // matmul_set_impl (matmul_impl)
#include "model/weights16.h"    // weights16_use: bf16_storage
#include "kernels/cpu/gemm.h"   // gemm_kernel_from_env, gemm_kernel_name: the GEMM's micro-kernel
#include "trainer/checkpoint.h" // save and load checkpoints
#include "trainer/dump.h"       // parity_dump: the JAX comparison
#include "trainer/hf.h"         // export-hf and load_hf
#include "trainer/same_start.h" // the files each host starts from, against process 0's
#include "trainer/sample.h"     // sample_print: text from the trained model
#include "data/tokens.h"        // token files: write, check the vocabulary
#include "data/loader.h"        // DataLoader: the batches
#include "base/memory.h"        // Device: each device's tagged allocator
#include "base/mesh.h"          // Mesh: the device threads
#include "base/context.h"       // leaves_of: the leaves a device's gradient block holds
#include "report/print.h"       // print_sharding, the global parameter count
#include "optim/offload.h"      // the model state to and from host memory
#include "pipeline/pipeline.h"  // the pipeline's schedule, printed
#include "sweep/sweep.h"        // ./train sweep and ./train figure
#include "model/attn_flash.h"   // attn_block_autotune
#include "model/vocab_tiling.h" // vocab_tiling_check: num_vocab_tiling against the batches
#include "report/plan.h"        // the planner's printout and memory trace
#include "report/profile.h"     // profile=true: where the steps' time went
#include "kernels/strict.h"     // device=cpu_strict: device memory the host cannot touch
#include "base/paths.h"         // paths checked, signals that stop a run
#include "trainer/metrics.h"    // each step's metrics, gathered and written
#include "trainer/files.h"      // train_files_check: no output is one of the run's other files
#include "base/runfiles.h"      // the same check for ./train prepare
#include "trainer/describe.h"   // ./train describe: the model a config trains, as JSON
#include "base/net.h"           // Net: the processes of a run over MPI (none for ./train)
#include <time.h>               // clock_gettime: step times
#ifdef MESHMOE_MPI
#include "base/net_mpi.h"       // the MPI transport, in ./train_mpi only
#endif

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// The parity dump runs on one device (the parity test's tool, below in main), and a run over
// several processes (./train_mpi, docs/mpi.md) has a device in each at least: said before the
// mesh starts. (A dry run is planned by process 0 alone: plan_alone.)
static void check_processes(const Config *c) {
    const Net *net = net_current();
    if (!net || net->nprocess == 1) return;
    if (c->dump_parity[0])
        die("dump_parity runs on one device (the parity test's tool), and %d processes (dcn_*_parallelism) hold "
            "%d devices at least: run it with ./train, without the dcn_* and ici_* keys", net->nprocess,
            net->nprocess);
}

// gpu_matmul as backend_gpu takes it: 0 the ordered GEMM, 1 cuBLAS, 2 cuBLAS with bf16 forward products.
static int gpu_matmul_mode(const Config *c) {
    return c->gpu_matmul == GPU_MATMUL_CUBLAS ? 1 : c->gpu_matmul == GPU_MATMUL_CUBLAS_BF16 ? 2 : 0;
}

// gpu_attention as backend_gpu takes it (gpu/backend.h): 0 rows, 1 tiles, 2 tensor cores, 3 cuDNN.
static int gpu_attention_kind(const Config *c) {
    switch (c->gpu_attention) {
    case GPU_ATTENTION_ROWS: return 0;
    case GPU_ATTENTION_TENSOR_CORES: return 2;
    case GPU_ATTENTION_CUDNN: return 3;
    default: return 1;
    }
}

// 1. The config: the preset file, then the key=value overrides, checked before any work.
static void read_config(Config *c, int argc, char **argv) {
    config_defaults(c);
    config_load_file(c, argv[1]);
    for (int i = 2; i < argc; i++) config_set_arg(c, argv[i]);
    mesh_hybrid_config(c);   // dcn x ici: from here on the ici_* sizes are the global mesh's
    check_processes(c);
    step_check_config(c);
    config_check_paths(c);   // every file named is readable or writable, before any work
    train_files_check(c, argv[1]);   // and no output is another of its files (trainer/files.h)
    if (c->profile && c->dry_run) die("profile=true times the kernels of training steps: a dry run computes none");
    const char *why;
    int cublas = gpu_matmul_mode(c);
    if (cublas && c->device != DEVICE_GPU) die("gpu_matmul=%s chooses device=gpu's products: this run is device=%s",
                                               cublas == 2 ? "cublas_bf16" : "cublas",
                                               c->device == DEVICE_CPU ? "cpu" : "cpu_strict");
    if (cublas == 2 && c->dtype != DTYPE_BFLOAT16)
        die("gpu_matmul=cublas_bf16 multiplies bf16 operands: it needs dtype=bfloat16 (in float32: gpu_matmul=cublas)");
    // The experiments that choose among cuBLAS's ways (gpu/matmul.cu) do nothing on a GPU run
    // without cuBLAS: said, not ignored (a CPU run, the GPU runs' reference, takes no notice).
    const char *how = getenv("MESHMOE_CUBLAS_BF16"), *grouped = getenv("MESHMOE_GROUPED");
    if (c->device == DEVICE_GPU && how && *how && cublas != 2)
        die("MESHMOE_CUBLAS_BF16 chooses how cuBLAS's bf16 products take float32 operands: it needs "
            "gpu_matmul=cublas_bf16");
    if (c->device == DEVICE_GPU && grouped && *grouped && !cublas)
        die("MESHMOE_GROUPED chooses between cuBLAS's grouped call and the backend's own kernel: it needs "
            "gpu_matmul=cublas or cublas_bf16");
    const char *lt = getenv("MESHMOE_CUBLAS_LT");
    if (c->device == DEVICE_GPU && lt && *lt && !cublas)
        die("MESHMOE_CUBLAS_LT chooses how cuBLAS's 16-bit products find their kernels: it needs "
            "gpu_matmul=cublas or cublas_bf16");
    if (c->device == DEVICE_GPU && lt && *lt && strcmp(lt, "on") && strcmp(lt, "off"))
        die("MESHMOE_CUBLAS_LT is 'on' (the default) or 'off', not '%s'", lt);
    int attention = gpu_attention_kind(c);
    const char *attention_name[] = {"rows", "tiles", "tensor_cores", "cudnn"};
    if (attention != 1 && c->device != DEVICE_GPU)
        die("gpu_attention=%s chooses device=gpu's attention kernels: this run is device=%s",
            attention_name[attention], c->device == DEVICE_CPU ? "cpu" : "cpu_strict");
    if (attention >= 2 && c->dtype != DTYPE_BFLOAT16)
        die("gpu_attention=%s multiplies bf16 operands: it needs dtype=bfloat16 (in float32: gpu_attention=tiles)",
            attention_name[attention]);
    if (c->device == DEVICE_GPU && !c->dry_run && !backend_gpu(cublas, attention, &why)) die("device=gpu: %s", why);
}

// Over several processes, fn(arg) runs in every process quietly (die() jumps back here), and
// then they agree: one message, from the first process that failed (base/net.h). So an error
// every process finds (a config key, a checkpoint's batch) is said once, and a file missing
// on one host stops every process with that host's message.
static void agreed(void (*fn)(void *), void *arg) {
    const Net *net = net_current();
    if (!net || net->nprocess == 1) { fn(arg); return; }
    jmp_buf jump;
    int failed = setjmp(jump);
    if (!failed) {
        die_set_jump(&jump, 1);
        fn(arg);
    }
    die_set_jump(NULL, 0);
    net->agree(failed, die_last_message());
}

typedef struct { Config *c; int argc; char **argv; } ConfigArgs;
static void read_config_of(void *arg) {
    ConfigArgs *a = arg;
    read_config(a->c, a->argc, a->argv);
}
// Every process of a run trains process 0's config: mpirun's MPMD form (`-np 1 ./train_mpi
// A : -np 1 ./train_mpi B`) can give each its own, and a key that differs would have the
// replicas' updates part ways, or one process wait forever for a step the others never take.
// num_threads and hbm_capacity describe a host's machine, and may differ.
static void check_same_config(void *arg) {
    const Config *c = arg;
    Config zero = *c;
    net_current()->share(&zero, sizeof zero);   // (the same program: the same layout)
    // The dcn keys first: the ici sizes here are already multiplied by them (base/hybrid.c).
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < config_num_keys(); i++) {
            const char *key = config_key_name(i);
            if ((strncmp(key, "dcn_", 4) == 0) != (pass == 0)) continue;
            if (!strcmp(key, "num_threads") || !strcmp(key, "hbm_capacity") || config_key_equal(c, &zero, key))
                continue;
            char here[CFG_STR + 16], there[CFG_STR + 16];
            config_format_value(c, key, here, sizeof here);
            config_format_value(&zero, key, there, sizeof there);
            die("%s is %s here and %s on process 0: every process of a run trains the same config (num_threads "
                "and hbm_capacity aside)", key, here, there);
        }
    }
}

static void read_config_agreed(Config *c, int argc, char **argv) {
    ConfigArgs a = {c, argc, argv};
    agreed(read_config_of, &a);
    const Net *net = net_current();
    if (net && net->nprocess > 1) agreed(check_same_config, c);
}

// A dry run over several processes: process 0 plans the global mesh alone, every device of
// every process, as ./train plans it (a plan runs nothing, so nothing would cross between
// processes); the others have nothing to do. Returns 1 in those others.
static int plan_alone(Config *c) {
    const Net *net = net_current();
    if (!c->dry_run || !net || net->nprocess == 1) return 0;
    if (net->process != 0) return 1;
    net_set(NULL);   // one process, holding the global mesh (the ici keys hold it already)
    c->dcn_data_parallelism = c->dcn_fsdp_parallelism = c->dcn_tensor_parallelism = 1;
    c->dcn_expert_parallelism = c->dcn_context_parallelism = c->dcn_pipeline_parallelism = 1;
    return 0;
}

// The block sizes of the flash attention, once the config holds.
static void autotune_blocks(Config *c) {
    // attn_block_autotune (docs/optimizations.md#attn_block_autotune): the block sizes, chosen
    // before the mesh starts so that every device uses the same ones (over several
    // processes, process 0 chooses for all).
    if (c->attn_block_autotune && cfg_attention_flash(c) && !c->dry_run) {
        const Net *net = net_current();
        if (!net || net->process == 0) attn_block_autotune(c);
        if (net && net->nprocess > 1) {
            int blocks[2] = {c->attn_block_q, c->attn_block_kv};
            net->share(blocks, sizeof blocks);
            c->attn_block_q = blocks[0];
            c->attn_block_kv = blocks[1];
        }
    }
}

// bf16_storage (model/weights16.h): the weights' bf16 compute copy and the activations at the
// cast points as 16-bit numbers, the copy kept from update to update where it can be (kept) or
// made for each use of a unit (per_unit); off: as float32 numbers holding bf16 values.
static Bf16Storage bf16_storage_checked(const Config *c) {
    if (c->bf16_storage != BF16_STORAGE_OFF && c->dtype != DTYPE_BFLOAT16)
        die("bf16_storage=%s stores bf16 mode's values as 16-bit numbers: it needs dtype=bfloat16 (in float32: "
            "bf16_storage=off)", bf16_storage_name(c->bf16_storage));
    return c->bf16_storage;
}

// 2. The mesh: one thread per device, each with its own allocator (base/mesh.h). A run
// that starts from saved weights has them checked against the config here, before training.
typedef struct { Mesh *mesh; const Config *c; } MeshArgs;
static void check_start(void *arg) {
    const MeshArgs *a = arg;
    model_check_mesh(a->c, a->mesh);
    const char *given[3], *keys[3] = {"load_hf", "load_checkpoint", "load_parameters_path"};
    const char *paths[3] = {a->c->load_hf, a->c->load_checkpoint, a->c->load_parameters_path};
    int n = 0;
    for (int i = 0; i < 3; i++)
        if (paths[i][0]) given[n++] = keys[i];
    if (n > 1) die("%s and %s both given: a run starts from one of them", given[0], given[1]);
    if (a->c->load_hf[0]) hf_check(a->c, a->c->load_hf);   // its config.json and its tensors' headers
    if (a->c->load_checkpoint[0]) checkpoint_check(a->c, a->c->load_checkpoint);   // its metadata and tensors
    if (a->c->load_parameters_path[0]) checkpoint_check_params(a->c, a->c->load_parameters_path);
}
// The mesh's sizes, and the parity dump's keys against its device count (trainer/dump.h).
static void check_mesh(void *arg) {
    const Config *c = arg;
    int ndev = mesh_check(c);
    if (c->dump_parity[0]) parity_dump_check(c, ndev);
}
// Over several processes, the files each host starts from are process 0's (trainer/same_start.h).
static void check_same_start(void *arg) {
    same_start_check(arg);
}

static void gemm_kernel_env(void *unused) {
    (void)unused;
    gemm_kernel_from_env();
}

static void start_mesh(Mesh *mesh, const Config *c) {
    agreed(check_mesh, (void *)c);   // (its sizes: over several processes, said once)
    mesh_init(mesh, c);
    MeshArgs a = {mesh, c};
    agreed(check_start, &a);   // over several processes, said once (or by the host that failed)
    if (mesh->nprocess > 1) agreed(check_same_start, (void *)c);
    // OpenBLAS runs single-threaded: our GEMMs are small row blocks, which the caller runs
    // in parallel with OpenMP; OpenBLAS's own threads on top would contend with those for
    // the same cores (steps about 2x slower on 2 cores, measured on mixtral-tiny).
    blas_set_threads(1);
    matmul_set_impl(matmul_impl_name(c->matmul_impl), c->device == DEVICE_GPU && c->gpu_matmul != GPU_MATMUL_ORDERED);
    weights16_use(bf16_storage_checked(c));
    agreed(gemm_kernel_env, NULL);   // (a value every host has: said once)
}

// 3. The data: the token file, checked against the vocabulary, and cut into the training and
// eval splits (over several processes, a file too short is said once, like the config).
// The sample's prompt is read here too, as the data's tokens (trainer/sampling.h).
typedef struct {
    const Config *c; uint32_t *tokens; size_t ntok; DataLoader dl; int *prompt, nprompt;
    uint64_t hash;   // data_hash of the tokens: a checkpoint's "dataset", and the processes' comparison
} Data;
static void load_data(void *arg) {
    Data *d = arg;
    int bytes;
    d->tokens = data_load_as(d->c->dataset_path, &d->ntok, &bytes);
    data_check_vocab(d->tokens, d->ntok, d->c->vocab_size, d->c->dataset_path);
    d->hash = data_hash(d->tokens, d->ntok);
    checkpoint_set_dataset(d->ntok, d->hash);   // (the "dataset" metadata of this run's saves)
    if (d->c->load_checkpoint[0] && !d->c->dry_run) checkpoint_check_dataset(d->c, d->c->load_checkpoint, d->ntok, d->hash);
    loader_init(&d->dl, d->tokens, d->ntok, d->c->max_target_length, d->c->eval_fraction);
    bytes = bytes || d->c->vocab_size == 256;   // (a token file of vocab 256 holds bytes, as ./train prepare writes)
    d->prompt = malloc(sizeof(int) * (strlen(d->c->prompt) + 1));   // (a token a character at most)
    if (!d->prompt) die("host out of memory for the prompt");
    d->nprompt = sampling_prompt(d->c->prompt, d->c->vocab_size, bytes, d->prompt);
}

// Over several processes, once every one has loaded its data: each host's copy of the file
// must hold process 0's tokens, or the replicas would train on batches no single run has
// (its count and a hash of its tokens compared; the sharing, a step every process takes,
// comes before anything that may fail).
static void check_same_data(void *arg) {
    const Data *d = arg;
    uint64_t mine[2] = {d->ntok, d->hash}, zero[2];
    memcpy(zero, mine, sizeof zero);
    net_current()->share(zero, sizeof zero);
    if (mine[0] != zero[0] || mine[1] != zero[1])
        die("dataset_path '%s' holds other tokens here than on process 0 (%zu tokens, hash %016llx; there %llu, "
            "%016llx): every host needs the same data file", d->c->dataset_path, d->ntok,
            (unsigned long long)mine[1], (unsigned long long)zero[0], (unsigned long long)zero[1]);
}

// A dry run's step: device 0's result and each planned device's figures after the step,
// for main to write once every device has its plan (base/mesh.h, mesh_run_classes).
typedef struct { int step; StepResult r; StepTime t; DevStats *stats; } DryStep;

// What main hands every device: the config, the mesh, the data (3); in a dry run, what the
// devices leave for main to write.
typedef struct {
    const Config *c; Mesh *mesh; const DataLoader *dl; size_t ntok; DryStep dry;
    const int *prompt; int nprompt;   // the sample's prompt, if the prompt key gives one
} Run;

// One device's run (4-6): its model, its share of the batch, and where it reports.
typedef struct {
    Run *run;
    Config c;                // this device's copy
    Model m;
    Device *dev;
    int id;                  // this device's number on the mesh
    int talk;                // device 0 prints
    int A;                   // microbatches per step (gradient_accumulation_steps)
    int B, Bg;               // sequences per microbatch: on this device, in the global batch
    int Be;                  // eval sequences on this device
    int S, Sl;               // tokens per sequence: all of them, this device's part (context parallelism)
    int *ids, *targets;              // (A*B, Sl) the step's batch
    int *eval_ids, *eval_targets;    // (Be, Sl) the training batch's buffers, unless set apart
    FILE *metrics;                   // metrics_file on device 0, else NULL
    StepProfile prof;                // profile=true: this device's kernels, steps after the first
    DevStats *stats;                 // (ndev) every device's figures after the step
    float first_eval;
    int first_eval_done;             // 0: no step was run, and run_end's eval is the first
} DeviceRun;

// The step's batch: the global batch is per_device_batch_size * num_devices sequences (as in
// MaxText), split over the devices that share the batch; under context parallelism each of
// them holds Sl = S / nctx tokens of every sequence.
static void batch_shape(DeviceRun *d) {
    const Config *c = &d->c;
    d->A = c->gradient_accumulation_steps;
    d->S = c->max_target_length;
    d->Bg = c->per_device_batch_size * d->run->mesh->ndev;
    if (d->Bg % d->m.shard.nbatch)
        die("internal: global batch %d does not split over %d devices", d->Bg, d->m.shard.nbatch);
    d->B = d->Bg / d->m.shard.nbatch;
    d->Sl = d->S / d->m.shard.nctx;
}

// The canonical tree adds the leaves of a sum over tokens pairwise in blocks of powers of
// two (base/treesum.h). A device's gradient block, the leaves of its sequences in one
// microbatch and chunk, is a whole subtree of the step's tree only when it holds a power of
// two of them; else, where the batch is split over devices or microbatches, the run's sums
// cut across that tree and its losses can leave one device's in the last bits. Said once.
static void print_tree_note(const DeviceRun *d) {
    const Config *c = &d->c;
    int M = pipeline_active() ? pipeline_microbatches(c) : 1;
    Leaves lv = leaves_of(c, d->B, d->Sl);
    long block = (long)(d->B / M) * (lv.chunk / lv.len);   // leaves of one sequence's chunk, each sequence
    int split = d->m.shard.nbatch > 1 || d->A > 1 || M > 1;
    if (!split || (block & (block - 1)) == 0) return;
    printf("note: a gradient block here holds %ld leaves (%d sequences x %ld), not a power of two: the sums' "
           "canonical tree (base/treesum.h) cuts across the devices or microbatches, so the losses can leave one "
           "device's in the last bits (a power of two of sequences per device and microbatch keeps them)\n",
           block, d->B / M, (long)(lv.chunk / lv.len));
}

// Device 0's start-up lines: the model, the BLAS, the mesh, the data, where the state lives.
static void print_start(const DeviceRun *d, size_t init_peak, size_t init_temp) {
    const Config *c = &d->c;
    const Mesh *mesh = d->run->mesh;
    const DataLoader *dl = d->run->dl;
    char b1[32], b2[64], b3[128], nt[32];
    size_t P = sharding_global_params(&d->m);
    printf("meshmoe: %s model, %d layers, %zu parameters (%s), %d experts top-%d, %s path%s\n",
           decoder_block_name(c->decoder_block), c->base_num_decoder_layers, P, mem_fmt(P * 4, b1, sizeof b1),
           c->num_experts, c->num_experts_per_tok, c->sparse_matmul ? "sparse (grouped)" : "dense",
           c->megablox ? ", each product one call for all the experts" : "");
    printf("BLAS: %s\n", blas_description());
    char gk[48] = "";   // the ordered GEMM's micro-kernel, where the CPU runs the products
    if (c->matmul_impl == MATMUL_ORDERED && c->device != DEVICE_GPU)
        snprintf(gk, sizeof gk, " (%s)", gemm_kernel_name());
    printf("kernels: %s backend, matmul_impl=%s%s%s%s%s\n", kern()->name, matmul_impl_name(c->matmul_impl), gk,
           c->device == DEVICE_CPU_STRICT && !c->dry_run ? ", device=cpu_strict (device memory closed outside the kernels)" : "",
           c->profile ? ", each kernel timed (profile=true)" : "",
           !weights16_on()          ? ""
           : model_copy16_kept(&d->m) ? ", the weights' bf16 copy as 16-bit numbers, kept from update to update"
                                      : ", the weights' bf16 copy as 16-bit numbers, made for each use of a unit");
    int most = mesh_threads_of(mesh, 0), least = mesh_threads_of(mesh, mesh->ndev - 1);   // (the first get more)
    if (most > least) snprintf(nt, sizeof nt, "%d or %d", most, least);
    else snprintf(nt, sizeof nt, "%d", most);
    printf("mesh: %s (%d device%s, one thread each, with %s OpenMP thread%s)\n", mesh_describe(mesh, b2, sizeof b2),
           mesh->ndev, mesh->ndev > 1 ? "s" : "", nt, most > 1 ? "s" : "");
    if (most > 1) printf("waiting OpenMP threads: %s\n", omp_wait_describe(b3, sizeof b3));
    if (mesh->nprocess > 1) {
        int ici[MESH_NAXES];
        for (int a = 0; a < MESH_NAXES; a++) ici[a] = mesh->size[a] / mesh->dcn[a];
        printf("processes: %d (dcn:", mesh->nprocess);
        for (int a = 0; a < MESH_NAXES; a++) if (mesh->dcn[a] > 1) printf(" %s=%d", MESH_AXIS_NAMES[a], mesh->dcn[a]);
        printf("), %d device%s each (ici:", mesh->nlocal, mesh->nlocal > 1 ? "s" : "");
        for (int a = 0; a < MESH_NAXES; a++) if (ici[a] > 1) printf(" %s=%d", MESH_AXIS_NAMES[a], ici[a]);
        printf("%s)\n", mesh->nlocal == 1 ? " none" : "");
    }
    printf("data: %s, %zu tokens (%zu train / %zu eval), batch %d x %d x %d tokens\n", c->dataset_path,
           d->run->ntok, dl->train_end - dl->train_begin, dl->eval_end - dl->eval_begin, d->A, d->Bg, d->S);
    print_tree_note(d);
    sharding_print_state(&d->m);
    printf("init peak %zu bytes (temp %zu)\n", init_peak, init_temp);
    if (c->print_sharding) sharding_print(&d->m, d->Bg, d->S);
    if (mesh->size[AX_STAGE] > 1) pipeline_print_schedule(c, mesh->size[AX_STAGE]);
}

// Weights from a checkpoint (with its optimizer and step, or the weights alone) or a Hugging
// Face export (every device takes its own slices).
static void load_weights(DeviceRun *d) {
    const Config *c = &d->c;
    if (c->load_checkpoint[0] && !c->dry_run) {
        checkpoint_load(&d->m, c->load_checkpoint);
        if (d->talk) printf("resumed from %s at step %d\n", c->load_checkpoint, d->m.step);
    }
    if (c->load_parameters_path[0] && !c->dry_run) {
        checkpoint_load_params(&d->m, c->load_parameters_path);
        if (d->talk) printf("loaded the weights of %s (step 0 here, a fresh optimizer)\n", c->load_parameters_path);
    }
    if (c->load_hf[0]) {
        char said[512];
        int exact = hf_load(&d->m, c->load_hf, said, sizeof said);
        if (d->talk) printf("%s the Hugging Face model %s%s%s%s\n", c->dry_run ? "checked" : "loaded", c->load_hf,
                            exact ? " (the query kernels exactly, from meshmoe_query_kernels.safetensors)" : "",
                            said[0] ? ": " : "", said);
    }
}

static int eval_batch(const DeviceRun *d);

// 4. The model on this device: initialised from global coordinates, then loaded if asked.
static void model_start(DeviceRun *d, Run *run, int dev_id) {
    memset(d, 0, sizeof *d);
    d->run = run;
    d->c = *run->c;
    d->dev = mem_device();
    d->id = dev_id;
    d->talk = dev_id == 0;
    mem_mark_reset(d->dev);
    step_init(&d->m, &d->c);
    size_t init_peak = d->dev->mark_total, init_temp = d->dev->mark[MEM_TEMP];
    batch_shape(d);
    // The head's tiles against the batches it will see (a pipeline's microbatches of the
    // training batch; the eval batch), before a checkpoint's load and the first step.
    vocab_tiling_check(&d->c, d->B / pipeline_microbatches(&d->c), d->Sl);
    if (d->c.eval_per_device_batch_size > 0)
        vocab_tiling_check(&d->c, eval_batch(d) / pipeline_microbatches(&d->c), d->Sl);
    if (d->talk) print_start(d, init_peak, init_temp);
    load_weights(d);
}

// eval_per_device_batch_size (docs/optimizations.md#eval_per_device_batch_size), read here
// only: the eval batch is set apart from the training batch, so a small eval batch bounds the
// eval peak (its forward activations) whatever the training batch; training is unchanged.
static int eval_batch(const DeviceRun *d) {
    const Config *c = &d->c;
    const Mesh *mesh = d->run->mesh;
    if (c->eval_per_device_batch_size <= 0) return d->B;
    int Beg = c->eval_per_device_batch_size * mesh->ndev;
    if (Beg % d->m.shard.nbatch)
        die("eval_per_device_batch_size %d x %d devices = %d eval sequences do not split over the %d devices "
            "that share the batch", c->eval_per_device_batch_size, mesh->ndev, Beg, d->m.shard.nbatch);
    int Be = Beg / d->m.shard.nbatch, M = pipeline_microbatches(c);   // a pipeline cuts the eval batch in M too
    if (Be % M)
        die("eval_per_device_batch_size %d x %d devices / %d devices sharing the batch = %d eval sequences per "
            "pipeline, which do not split into num_pipeline_microbatches=%d", c->eval_per_device_batch_size,
            mesh->ndev, d->m.shard.nbatch, Be, M);
    return Be;
}

// What the loop needs: the batch buffers, the metrics file, the gathered figures.
static void loop_begin(DeviceRun *d) {
    const Config *c = &d->c;
    d->Be = eval_batch(d);
    size_t n = (size_t)d->A * d->B * d->Sl, ne = (size_t)d->Be * d->Sl;
    d->ids = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * n, "batch ids");
    d->targets = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * n, "batch targets");
    d->eval_ids = d->ids;
    d->eval_targets = d->targets;
    if (c->eval_per_device_batch_size > 0) {
        d->eval_ids = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * ne, "eval batch ids");
        d->eval_targets = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * ne, "eval batch targets");
    }
    if (d->talk && c->metrics_file[0] && !c->dry_run) d->metrics = metrics_open(c->metrics_file, d->m.step);
    d->stats = calloc((size_t)d->run->mesh->ndev, sizeof(DevStats));
}

static void loop_end(DeviceRun *d) {
    if (d->metrics) metrics_close(d->metrics);
    free(d->stats);
    if (d->eval_ids != d->ids) { mem_free(d->eval_ids); mem_free(d->eval_targets); }
    mem_free(d->ids);
    mem_free(d->targets);
}

// Host memory for n ints: where the loader writes a sequence, before it goes to the device.
static int *host_ints(size_t n) {
    int *p = malloc(sizeof(int) * n);
    if (!p) die("host out of memory for one sequence (%zu tokens)", n / 2);
    return p;
}

// This device's part of a sequence: under context parallelism part crank of nctx, its Sl
// tokens from position crank*Sl on, from the loader's host copy of the sequence into the
// device's batch.
static void take_part(const DeviceRun *d, const int *seq_ids, const int *seq_tg, int *ids, int *targets) {
    int p0 = d->m.shard.crank * d->Sl;
    mem_upload(ids, seq_ids + p0, sizeof(int) * d->Sl);
    mem_upload(targets, seq_tg + p0, sizeof(int) * d->Sl);
}

// This device's part of the step's batch. The global batch is A microbatches of Bg
// sequences; sequence i of microbatch mb is training window g = step * A*Bg + mb*Bg + i, a
// pure function of its place (data/loader.h), and this device takes i in [brank*B,
// (brank+1)*B) of every microbatch. A pipeline cuts each microbatch again into M pipeline
// microbatches of Bg/M sequences, and the device takes its piece of each: i in
// [k*Bg/M + brank*B/M, ...) for k = 0..M-1 (pipeline/pipeline.h).
static void fetch_batch(const DeviceRun *d, int step) {
    int A = d->A, B = d->B, Bg = d->Bg, S = d->S, M = pipeline_microbatches(&d->c), Bm = B / M;
    int *seq = host_ints(2 * S);   // one sequence on the host: ids, then targets
    for (int mb = 0; mb < A; mb++)
        for (int i = 0; i < B; i++) {
            int64_t g = (int64_t)step * A * Bg + (int64_t)mb * Bg + (int64_t)(i / Bm) * (Bg / M) +
                        (int64_t)d->m.shard.brank * Bm + i % Bm;
            size_t at = ((size_t)mb * B + i) * d->Sl;
            loader_train_sequence(d->run->dl, g, seq, seq + S);
            take_part(d, seq, seq + S, d->ids + at, d->targets + at);
        }
    free(seq);
}

// Mean eval loss over eval_steps batches of Be * nbatch held-out windows (Be on this device).
static float evaluate(DeviceRun *d) {
    const DataLoader *dl = d->run->dl;
    int S = d->S, Be = d->Be, Beg = Be * d->m.shard.nbatch, steps = d->c.eval_steps;
    int64_t nwin = loader_num_eval_windows(dl);
    int *seq = host_ints(2 * S);   // one sequence on the host: ids, then targets
    double sum = 0;
    for (int k = 0; k < steps; k++) {
        for (int i = 0; i < Be; i++) {
            loader_eval_sequence(dl, ((int64_t)k * Beg + (int64_t)d->m.shard.brank * Be + i) % nwin, seq, seq + S);
            take_part(d, seq, seq + S, d->eval_ids + (size_t)i * d->Sl, d->eval_targets + (size_t)i * d->Sl);
        }
        sum += eval_loss(&d->m, d->eval_ids, d->eval_targets, Be, d->Sl);
    }
    free(seq);
    return (float)(sum / steps);
}

// One training step, timed. The planner and the memory trace watch the run's first step.
static StepTime timed_step(DeviceRun *d, int first, StepResult *r) {
    const Config *c = &d->c;
    Device *dev = d->dev;
    if (!c->dry_run) fetch_batch(d, d->m.step);
    mem_reset_peak(dev);
    if (first && (c->dry_run || c->memory_trace[0])) plan_watch_begin(dev, c->memory_trace[0] != 0);
    if (c->profile) profile_discard();   // kernels run outside the step (evaluation) are not counted
    double flops0 = dev->flops, t0 = now_ms();
    train_step(&d->m, d->ids, d->targets, d->A, d->B, d->Sl, r);
    plan_watch_end(dev);
    StepTime t;
    t.ms = now_ms() - t0;
    if (c->profile && !first) step_profile_add(&d->prof, t.ms);
    t.gflops = (dev->flops - flops0) * d->run->mesh->ndev / (t.ms * 1e6);
    t.tok_s = (double)d->A * d->Bg * d->S / (t.ms / 1e3);
    return t;
}

// The step's line on device 0 (every log_period steps and the last), and its metrics line.
static void log_step(const DeviceRun *d, int step, const StepResult *r, StepTime t) {
    const Config *c = &d->c;
    int ndev = d->run->mesh->ndev;
    char b[32];
    if (d->talk && (step % c->log_period == 0 || step == c->steps - 1))
        printf("step %5d | loss %.4f | aux %.4f | lr %.2e | grad norm %.3f | %7.1f ms | %8.0f tok/s | "
               "%6.1f GFLOP/s | peak %s\n", step, r->loss, r->aux_loss, r->lr, r->grad_norm, t.ms, t.tok_s, t.gflops,
               mem_fmt(metrics_peak(d->stats, ndev), b, sizeof b));
    if (d->metrics) metrics_write(d->metrics, c->metrics_file, step, r, t, d->stats, ndev);
}

// 5. The training loop, from the model's step to run_steps or steps. A dry run (the planner,
// report/plan.h) runs one step that makes every allocation of a real step and computes
// nothing: no data, no evaluation; its figures are kept for main. SIGINT/SIGTERM/SIGHUP during the
// loop: the step finishes, and every device sees the signal in the same gathered figures, so
// all stop after the same step (base/paths.h). Returns that signal, or 0.
static int train_loop(DeviceRun *d) {
    const Config *c = &d->c;
    Model *m = &d->m;
    int stop = c->run_steps > 0 ? MM_MIN(c->steps, m->step + c->run_steps) : c->steps;
    if (c->dry_run) stop = m->step + 1;
    // (a run with no step to make, a checkpoint's eval and sample, evaluates once, in run_end)
    d->first_eval_done = !c->dry_run && m->step < stop;
    d->first_eval = d->first_eval_done ? evaluate(d) : 0.0f;
    if (d->talk && d->first_eval_done) printf("step %5d | eval loss %.4f\n", m->step, d->first_eval);
    int first = m->step, stop_sig = 0;
    // The first device of each process arms the stop (over several processes each has its own).
    const Mesh *mesh = d->run->mesh;
    int arms = d->id == mesh_device_of(mesh, mesh->process, 0);
    if (arms) signals_allow_stop(1);
    while (m->step < stop && !stop_sig) {
        int step = m->step;
        StepResult r;
        StepTime t = timed_step(d, step == first, &r);
        if (c->dry_run) {
            DryStep *dry = &d->run->dry;
            metrics_device(d->dev, &r, &dry->stats[d->id]);
            if (d->talk) { dry->step = step; dry->r = r; dry->t = t; }
            break;
        }
        metrics_gather(d->run->mesh, d->dev, &r, d->stats);
        for (int i = 0; i < d->run->mesh->ndev; i++) stop_sig = MM_MAX(stop_sig, d->stats[i].stop);
        log_step(d, step, &r, t);
        if (m->step == stop) continue;   // the last step's eval and save are run_end's
        if (c->eval_interval > 0 && m->step % c->eval_interval == 0) {
            float e = evaluate(d);
            if (d->talk) printf("step %5d | eval loss %.4f\n", m->step, e);
        }
        if (c->save_checkpoint[0] && c->checkpoint_period > 0 && m->step % c->checkpoint_period == 0)
            checkpoint_save(m, c->save_checkpoint);   // every device (a collective)
    }
    if (arms) signals_allow_stop(0);
    if (d->talk && c->profile) {
        step_profile_print(&d->prof);
        step_profile_print_products(&d->prof);
        step_profile_print_kernels(&d->prof);
    }
    return stop_sig;
}

// A run stopped by a signal saves its checkpoint and ends.
static void stop_on_signal(const DeviceRun *d, int sig) {
    const Config *c = &d->c;
    if (c->save_checkpoint[0]) checkpoint_save(&d->m, c->save_checkpoint);   // every device (a collective)
    if (!d->talk) return;
    fflush(stdout);
    // (m.step: the steps done, the next one's number in the log's count from 0)
    if (c->save_checkpoint[0])
        fprintf(stderr, "meshmoe: stopped by %s after %d of %d steps; checkpoint saved to %s (a resume goes on at step %d)\n",
                signal_name(sig), d->m.step, c->steps, c->save_checkpoint, d->m.step);
    else
        fprintf(stderr, "meshmoe: stopped by %s after %d of %d steps; no checkpoint saved (save_checkpoint is not set)\n",
                signal_name(sig), d->m.step, c->steps);
}

// A sample from the model (trainer/sample.c: on every mesh, one device's text).
static void sample(DeviceRun *d) {
    if (d->c.sample_length <= 0) return;
    state_params_in(&d->m);   // weights kept in host memory come to the device to sample
    SamplingRule rule = sampling_rule(&d->c);
    sample_print(&d->m, d->run->dl, d->run->prompt, d->run->nprompt, d->c.sample_length, &rule);
    state_params_out(&d->m);
}

// 6. The end of a run: the final eval (its own peak, next to the last step's as the step
// reported it: the device's peak since that step began holds the eval too), the
// checkpoint, a sample.
static void run_end(DeviceRun *d) {
    const Config *c = &d->c;
    Device *dev = d->dev;
    mem_mark_reset(dev);
    float last_eval = evaluate(d);
    if (!d->first_eval_done) d->first_eval = last_eval;
    if (d->talk) {
        printf("step %5d | eval loss %.4f (first %.4f)\n", d->m.step, last_eval, d->first_eval);
        char last[64] = "";   // (one printf: other device threads print lines of their own meanwhile)
        if (d->first_eval_done) snprintf(last, sizeof last, "; last training step peak %zu bytes", d->stats[d->id].peak_total);
        printf("eval peak %zu bytes (temp %zu, activations %zu) with %d eval sequences per device%s\n",
               dev->mark_total, dev->mark[MEM_TEMP], dev->mark[MEM_ACTIVATIONS], d->Be, last);
    }
    if (c->save_checkpoint[0]) {
        checkpoint_save(&d->m, c->save_checkpoint);
        if (d->talk)
            printf("saved checkpoint %s (step %d%s)\n", c->save_checkpoint, d->m.step,
                   checkpoint_saves_loaded(d->m.step) ? ", no step taken: with the loaded checkpoint's config and data" : "");
    } else if (d->talk && c->load_checkpoint[0] && d->first_eval_done) {
        // (a resumed run trains on a checkpoint: without a save, what it trained is gone)
        printf("no checkpoint saved (save_checkpoint is not set): %s still holds its own step\n",
               c->load_checkpoint);
    }
    sample(d);
}

// What every device runs (4-6): the same program on its own share (SPMD). Device 0 talks.
static void device_main(int dev_id, void *arg) {
    DeviceRun d;
    model_start(&d, (Run *)arg, dev_id);
    if (d.c.dump_parity[0]) {   // the parity test's tool (trainer/dump.h): its own steps and files
        parity_dump(&d.m, d.run->dl, d.c.dump_parity);
    } else {
        loop_begin(&d);
        int sig = train_loop(&d);
        if (sig) stop_on_signal(&d, sig);
        else if (!d.c.dry_run) run_end(&d);
        loop_end(&d);
    }
    model_free(&d.m);
}

// 4-6 on every device. A dry run plans one device per class of equal plans.
static void run_devices(Run *run) {
    const Config *c = run->c;
    Mesh *mesh = run->mesh;
    mem_set_dry(c->dry_run);
    // The kernels every device runs (kernels/kernels.h): the planner's, the GPU's
    // (device=gpu, checked in read_config), the plain loops (matmul_impl=plain: the same
    // bits, slower) or the fast CPU kernels; under device=cpu_strict over device memory the
    // host cannot touch (kernels/strict.h); with profile=true each kernel timed
    // (kernels/profile.h).
    const char *why;
    const Backend *kernels = c->dry_run                ? &backend_dry
                           : c->device == DEVICE_GPU ? backend_gpu(gpu_matmul_mode(c), gpu_attention_kind(c), &why)
                           : c->matmul_impl == MATMUL_PLAIN ? backend_cpu_plain() : &backend_cpu;
    if (c->device == DEVICE_CPU_STRICT && !c->dry_run) kernels = strict_backend(kernels, mem_describe_address);
    kern_use_default(c->profile ? profile_backend(kernels) : kernels);
    if (!c->dry_run) {
        mesh_run(mesh, device_main, run);
        return;
    }
    // The planner reports a device that does not fit instead of stopping at its first
    // allocation that does not: its devices have no capacity limit.
    for (int d = 0; d < mesh->ndev; d++) mesh->devices[d].capacity = 0;
    printf("dry run: one training step's allocations, nothing computed (the MoE routing is replaced by a "
           "balanced one; every routing-dependent buffer is allocated for its bound, so the plan equals a "
           "real step's measured peaks)\n");
    // device=gpu with cuBLAS's products: each device also holds cuBLAS's workspace, Hopper's.
    if (c->device == DEVICE_GPU && gpu_matmul_mode(c)) {
        dry_plan_workspace(cublas_workspace_bytes(9));
        printf("dry run: each device holds cuBLAS's workspace, %zu MiB as a CUDA build takes it on Hopper and later "
               "(%zu MiB on earlier GPUs), under the tag workspace\n", cublas_workspace_bytes(9) >> 20,
               cublas_workspace_bytes(8) >> 20);
    }
    run->dry.stats = calloc((size_t)mesh->ndev, sizeof(DevStats));
    mesh_run_classes(mesh, device_main, run, c->dry_run_all_devices);
}

// The dry run's metrics line: every device has the figures of its class's representative.
static void write_dry_metrics(const Config *c, const Mesh *mesh, const DryStep *dry) {
    FILE *f = metrics_open(c->metrics_file, dry->step);
    DevStats *stats = calloc((size_t)mesh->ndev, sizeof(DevStats));
    for (int d = 0; d < mesh->ndev; d++) stats[d] = dry->stats[mesh->rep[d]];
    metrics_write(f, c->metrics_file, dry->step, &dry->r, dry->t, stats, mesh->ndev);
    free(stats);
    metrics_close(f);
}

// 7. What the run measured: the memory trace if asked, then each device's memory report,
// or the plan of a dry run (with its metrics line).
// Returns 0 for a dry run whose plan does not fit hbm_capacity (main's exit status 2), else 1.
static int report(const Run *run) {
    const Config *c = run->c;
    Mesh *mesh = run->mesh;
    if (c->memory_trace[0]) {
        plan_trace_write(mesh, c->memory_trace);   // (over several processes, by process 0)
        if (mesh->process == 0)
            printf("memory trace of the first step written to %s (./train plot %s DIR draws it)\n", c->memory_trace,
                   c->memory_trace);
    }
    if (c->dry_run && c->metrics_file[0]) write_dry_metrics(c, mesh, &run->dry);
    mesh_collect_devices(mesh);   // over several processes, process 0 reports every device
    int fits = 1;
    if (c->dry_run) fits = plan_print(mesh, (size_t)c->hbm_capacity);
    else if (mesh->process == 0)
        for (int d = 0; d < mesh->ndev; d++) mem_print_report(&mesh->devices[d]);
    plan_free(mesh);
    return fits;
}

static int cmd_prepare(int argc, char **argv) {
    if (argc != 4) die("usage: ./train prepare IN.txt OUT.bin");
    check_input_file("prepare input", argv[2]);
    check_output_path("prepare output", argv[3]);
    RunFiles files;
    runfiles_init(&files);
    runfiles_input(&files, "prepare input", argv[2]);
    runfiles_output(&files, "prepare output", argv[3]);
    runfiles_check(&files);
    runfiles_free(&files);
    size_t n;
    uint32_t *tok = text_read_bytes(argv[2], &n);
    tokfile_write(argv[3], tok, n);
    printf("wrote %zu tokens (byte-level, vocab 256) to %s\n", n, argv[3]);
    free(tok);
    return 0;
}

// A subcommand under mpirun with several processes: each would run it and write its files.
static void one_process(void *name) {
    die("'%s' runs as one process (it has no mesh to share): start it as ./train, or with mpirun -np 1",
        (const char *)name);
}

// The subcommands other than training: 1 with *rc set when argv names one.
static int subcommand(int argc, char **argv, int *rc) {
    static const char *const NAMES[] = {"prepare", "export-hf", "hf-preset", "sweep", "describe", "figure", "plot"};
    const Net *net = net_current();
    for (size_t i = 0; net && net->nprocess > 1 && i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (!strcmp(argv[1], NAMES[i])) agreed(one_process, argv[1]);   // (said once)
    if (!strcmp(argv[1], "prepare")) *rc = cmd_prepare(argc, argv);
    else if (!strcmp(argv[1], "export-hf")) {
        if (argc != 4 && (argc != 5 || strcmp(argv[4], "per-expert")))
            die("usage: ./train export-hf CKPT.safetensors OUT_DIR [per-expert]");
        *rc = hf_export(argv[2], argv[3], argc == 5);
    } else if (!strcmp(argv[1], "hf-preset")) {
        if (argc != 3) die("usage: ./train hf-preset HF_DIR (prints a preset's model keys for load_hf=HF_DIR)");
        *rc = hf_preset(argv[2]);
    } else if (!strcmp(argv[1], "sweep")) *rc = cmd_sweep(argc, argv);
    else if (!strcmp(argv[1], "describe")) *rc = describe_main(argc, argv);
    else if (!strcmp(argv[1], "figure")) *rc = cmd_figure(argc, argv);
    else if (!strcmp(argv[1], "plot")) {
        if (argc != 4) die("usage: ./train plot TRACE.csv OUT_DIR");
        *rc = plot_trace(argv[2], argv[3]);
    } else return 0;
    return 1;
}

int main(int argc, char **argv) {
    blas_prefer_fast_kernels(argv);   // (may start the program again: before MPI starts)
#ifdef MESHMOE_MPI
    net_mpi_start(&argc, &argv);   // ./train_mpi: one process of an mpirun job (base/net_mpi.h)
#endif
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("usage: ./train CONFIG.yml [key=value ...]\n       ./train prepare IN.txt OUT.bin\n"
               "       ./train sweep CONFIG.yml [key=value ...]\n       ./train plot TRACE.csv OUT_DIR\n"
               "       ./train figure timelines|peaks|schedule|meshes OUT.svg ...\n"
               "       ./train export-hf CKPT.safetensors OUT_DIR [per-expert]\n"
               "       ./train hf-preset HF_DIR > PRESET.yml\n"
               "       ./train describe CONFIG.yml [key=value ...]\n"
               "       ./train --help-config\n");
        return argc < 2;
    }
    if (!strcmp(argv[1], "--help-config")) { config_print_help(argc > 2 && !strcmp(argv[2], "--markdown")); return 0; }
    signals_install();
    int rc;
    if (subcommand(argc, argv, &rc)) return rc;

    Config c;
    read_config_agreed(&c, argc, argv);                                   // 1
    if (plan_alone(&c)) return 0;
    autotune_blocks(&c);
    Mesh mesh;
    start_mesh(&mesh, &c);                                                // 2
    Data data = {.c = &c};
    agreed(load_data, &data);                                             // 3
    if (mesh.nprocess > 1) agreed(check_same_data, &data);
    Run run = {&c, &mesh, &data.dl, data.ntok, {0}, data.prompt, data.nprompt};
    run_devices(&run);                                                    // 4-6
    int fits = report(&run);                                              // 7
    free(run.dry.stats);
    mesh_free(&mesh);
    free(data.tokens);
    free(data.prompt);
    int sig = signals_stop_requested();
    return sig ? 128 + sig : fits ? 0 : 2;   // (2: a plan over hbm_capacity, for a script to tell)
}
