"""The LoRA fine-tuning engine: plain Python + torch + transformers + peft, no Django.

    config = TrainConfig.from_dict(job.config)        # ConfigError(.field, .message) for unknown keys
    config.validate()                                 # ConfigError for values out of range
    check_target_modules(config, model_dir)           # before launch: headers only, no weights
    result = train(config, model_dir=model_dir, output_dir=job_dir,
                   train_rows=rows, eval_rows=eval_rows, callbacks=MyCallbacks())
    result.adapter_dir                                # PeftModel.from_pretrained(base, result.adapter_dir)

Modules, in the order a run uses them: config (TrainConfig), lora (which layers are adapted),
data (rows -> examples -> packed rows -> batches), methods (one module per training method: sft, dpo;
what rows it reads, its batches and loss), loop (train: the one skeleton, setup -> fit -> validate ->
save), checkpoint (atomic checkpoints and resume), distributed (train_distributed: the same run over
config.devices processes under torchrun, data-parallel). Importing this package imports neither torch nor
transformers; train() does.
"""

from .checkpoint import TrainerState
from .config import ConfigError, TrainConfig
from .data import Example, TrainingDataError, build_examples
from .distributed import DistributedTrainingError, train_distributed
from .loop import TrainCallbacks, TrainCancelled, TrainResult, train
from .lora import check_target_modules, lora_trainable_parameters, target_module_names

__all__ = [
    "ConfigError",
    "DistributedTrainingError",
    "Example",
    "TrainCallbacks",
    "TrainCancelled",
    "TrainConfig",
    "TrainResult",
    "TrainerState",
    "TrainingDataError",
    "build_examples",
    "check_target_modules",
    "lora_trainable_parameters",
    "target_module_names",
    "train",
    "train_distributed",
]
