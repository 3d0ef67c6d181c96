#!/usr/bin/env bash
# The GPU checks, one prepared run of under 10 minutes on a CUDA machine (the device tool's machine, or
# any GPU box with torch, transformers and peft): the engine's training tests on CUDA (the QLoRA ones run
# only there), then bench/gpu_qlora.py. Results go to $OUT (or /tmp/gpu-check); bench/README.md records
# what a run measured. Needs: the bitsandbytes and liger-kernel wheels in .whl/ (or installed; without
# liger-kernel its test is skipped and gpu_train_lora's ours_liger side fails), and the demo model's
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
python3 -c "from importlib.metadata import version; from workers.training.fused_loss import liger_available; print('liger-kernel', version('liger-kernel'), '| fused linear cross-entropy imports:', liger_available())" \
  || echo "liger-kernel: not installed (put its wheel in .whl/)"
status=0
# No conftest (it needs Django): the engine's own tests, on the GPU since device "auto" picks CUDA.
timeout 240 python3 -m pytest --noconftest -o addopts="" -p no:cacheprovider -q -rs --timeout 120 \
  tests/workers/test_training.py tests/workers/test_training_methods.py tests/workers/test_training_fast_steps.py \
  -k "not compiled_blocks" 2>&1 | tee "$OUT/engine_tests.log" | tail -40 \
  || status=1
timeout 300 python3 -m bench.gpu_qlora --tokenizer .gpucheck/tokenizer 2>&1 | tee "$OUT/gpu_qlora.log" | tail -30 \
  || status=1
# Five sides since the step options (~2 minutes more): baseline, ours, ours_liger, ours_chunked, ours_compile.
timeout 400 python3 -m bench.gpu_train_lora --tokenizer .gpucheck/tokenizer 2>&1 | tee "$OUT/gpu_train_lora.log" | tail -16 \
  || status=1
exit $status
