#!/usr/bin/env bash
# The GPU checks, one prepared run of under 10 minutes on a CUDA machine (the device tool's machine, or
# any GPU box with torch, transformers and peft): the engine's training tests on CUDA (the QLoRA ones run
# only there), then bench/gpu_qlora.py. Results go to $OUT (or /tmp/gpu-check); bench/README.md records
# what a run measured. Needs: the bitsandbytes wheel in .whl/ (or installed), and the demo model's
# tokenizer files in .gpucheck/tokenizer (copied from a converted demo model: bench/README.md, GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi -L
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
python3 -c "import torch, transformers, peft, bitsandbytes; print('torch', torch.__version__, torch.cuda.get_device_name(), '| transformers', transformers.__version__, '| peft', peft.__version__, '| bitsandbytes', bitsandbytes.__version__)"
status=0
# No conftest (it needs Django): the engine's own tests, on the GPU since device "auto" picks CUDA.
timeout 240 python3 -m pytest --noconftest -o addopts="" -p no:cacheprovider -q -rs --timeout 120 \
  tests/workers/test_training.py tests/workers/test_training_methods.py 2>&1 | tee "$OUT/engine_tests.log" | tail -40 \
  || status=1
timeout 300 python3 -m bench.gpu_qlora --tokenizer .gpucheck/tokenizer 2>&1 | tee "$OUT/gpu_qlora.log" | tail -30 \
  || status=1
timeout 300 python3 -m bench.gpu_train_lora --tokenizer .gpucheck/tokenizer 2>&1 | tee "$OUT/gpu_train_lora.log" | tail -12 \
  || status=1
exit $status
