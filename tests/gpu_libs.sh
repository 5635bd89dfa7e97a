# tests/gpu_libs.sh, sourced by tests/gpu.sh and tests/gpu_bench.sh: the GPU machine's cuDNN 9
# and CUDA 13 runtime on LD_LIBRARY_PATH where the loader does not find them by name.
# ./train_gpu loads cuDNN with dlopen when gpu_attention=cudnn asks (gpu/attn_cudnn.cu), and
# cuDNN's frontend loads libcudart.so.13 for the few runtime calls it makes itself; cuDNN
# compiles some of its attention kernels at run time with NVRTC (libnvrtc.so.13), without
# which it finds no engine for them; a machine with PyTorch has all three in its python's
# wheels (nvidia-cudnn-cu13, nvidia-cuda-runtime, nvidia-cuda-nvrtc).
gpu_lib_dirs() {
    ${PEERS:-python3} - "$@" << 'PY' 2> /dev/null
import ctypes, glob, os, site, sys
for name in sys.argv[1:]:
    try:
        ctypes.CDLL(name)   # found by name already
        continue
    except OSError:
        pass
    roots = site.getsitepackages() + ["/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu"]
    hits = [p for r in roots for p in glob.glob(os.path.join(r, "**", name), recursive=True)]
    if hits:
        print(os.path.dirname(sorted(hits)[0]))
PY
}
for dir in $(gpu_lib_dirs libcudnn.so.9 libcudart.so.13 libnvrtc.so.13); do
    case ":${LD_LIBRARY_PATH:-}:" in *":$dir:"*) ;; *) export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
done
echo "gpu_libs: LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} (cuDNN 9, the CUDA 13 runtime and NVRTC for gpu_attention=cudnn)"
