"""The launch form: inputs plus every TrainConfig field. Ranges are checked by the service
(one place, the same for the API), whose errors name `config.<field>`; the view shows them
on the field of that name."""

from django import forms

SPLITS = [("", "all rows"), ("train", "train"), ("validation", "validation"), ("test", "test")]
EVAL_SPLITS = [("", "no evaluation"), ("validation", "validation"), ("test", "test"), ("train", "train")]


class LaunchForm(forms.Form):
    name = forms.CharField(max_length=120)
    base_model = forms.TypedChoiceField(coerce=int, label="Base model")
    dataset_version = forms.TypedChoiceField(coerce=int, label="Dataset version")
    train_split = forms.ChoiceField(choices=SPLITS, required=False, label="Training split")
    eval_split = forms.ChoiceField(choices=EVAL_SPLITS, required=False, label="Evaluation split")
    priority = forms.ChoiceField(choices=[("normal", "normal"), ("low", "low"), ("high", "high (project admins)")],
                                 help_text="The shared GPU queue serves high, then normal, then low.")
    method = forms.ChoiceField(choices=[("sft", "supervised (SFT): learn the responses"),
                                        ("dpo", "preference (DPO): prefer the chosen over the rejected response")],
                               help_text="DPO needs rows with a prompt, a response (the chosen one) and a "
                                         "“rejected” column, as annotation and comparison exports write them.")
    dpo_beta = forms.FloatField(label="DPO beta", help_text="DPO only: how far the model may move from the base.")
    format = forms.ChoiceField(choices=[("prompt_response", "prompt / response"), ("chat", "chat messages")])
    prompt_template = forms.CharField(required=False, help_text="prompt / response only: {prompt} is replaced by "
                                                                "the row's prompt.")
    loss_on = forms.ChoiceField(choices=[("response", "responses only (prompt masked)"), ("all", "every token")],
                                label="Loss on")
    lora_r = forms.IntegerField(label="LoRA rank")
    lora_alpha = forms.IntegerField(label="LoRA alpha")
    lora_dropout = forms.FloatField(label="LoRA dropout")
    target_preset = forms.ChoiceField(choices=[("attention", "attention projections"),
                                               ("all_linear", "all linear layers"), ("custom", "custom list")],
                                      label="Target modules")
    target_custom = forms.CharField(required=False, label="Custom target modules",
                                    help_text="Comma-separated module names, e.g. q_proj, v_proj.")
    learning_rate = forms.FloatField(label="Learning rate")
    lr_scheduler = forms.ChoiceField(choices=[("cosine", "cosine"), ("linear", "linear"), ("constant", "constant")],
                                     label="Scheduler")
    warmup_steps = forms.IntegerField(label="Warm-up steps")
    epochs = forms.IntegerField()
    max_steps = forms.IntegerField(required=False, label="Max steps", help_text="Overrides epochs when set.")
    batch_size = forms.IntegerField(label="Batch size")
    grad_accum = forms.IntegerField(label="Gradient accumulation")
    max_seq_len = forms.IntegerField(label="Max sequence length")
    packing = forms.BooleanField(required=False, help_text="Several examples per row; they never attend to each "
                                                           "other.")
    weight_decay = forms.FloatField(label="Weight decay")
    eval_every = forms.IntegerField(required=False, label="Evaluate every N steps",
                                    help_text="Empty: only at the end.")
    eval_at_start = forms.BooleanField(required=False, label="Evaluate the base model first",
                                       help_text="Step 0 on the charts and the base model's samples.")
    early_stopping_patience = forms.IntegerField(label="Early-stopping patience", help_text="Evaluations without "
                                                 "improvement before stopping; 0 is off.")
    checkpoint_every = forms.IntegerField(label="Checkpoint every N steps")
    seed = forms.IntegerField()
    precision = forms.ChoiceField(choices=[("auto", "auto (bf16 on capable GPUs, fp32 on CPU)"), ("bf16", "bf16"),
                                           ("fp32", "fp32")])
    gradient_checkpointing = forms.BooleanField(required=False, label="Gradient checkpointing")

    CONFIG_FIELDS = ["method", "dpo_beta", "format", "prompt_template", "loss_on", "lora_r", "lora_alpha", "lora_dropout", "learning_rate",
                     "lr_scheduler", "warmup_steps", "epochs", "max_steps", "batch_size", "grad_accum", "max_seq_len",
                     "packing", "weight_decay", "eval_every", "eval_at_start", "early_stopping_patience",
                     "checkpoint_every", "seed", "precision", "gradient_checkpointing"]

    FIELDSETS = [
        ("Inputs", ["name", "priority", "method", "dpo_beta", "base_model", "dataset_version", "train_split", "eval_split"]),
        ("Data format", ["format", "prompt_template", "loss_on", "max_seq_len", "packing"]),
        ("LoRA", ["lora_r", "lora_alpha", "lora_dropout", "target_preset", "target_custom"]),
        ("Optimisation", ["learning_rate", "lr_scheduler", "warmup_steps", "epochs", "max_steps", "batch_size",
                          "grad_accum", "weight_decay", "precision", "gradient_checkpointing"]),
        ("Evaluation and checkpoints", ["eval_every", "eval_at_start", "early_stopping_patience", "checkpoint_every", "seed"]),
    ]

    def fieldsets(self) -> list[tuple[str, list]]:
        return [(legend, [self[name] for name in names]) for legend, names in self.FIELDSETS]

    def __init__(self, *args, models=(), versions=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["base_model"].choices = [(m.pk, m.name) for m in models]
        self.fields["dataset_version"].choices = [
            (v.pk, f"{v.dataset.name} v{v.number} ({v.row_count} rows)") for v in versions]

    @classmethod
    def initial_from(cls, config: dict, **inputs) -> dict:
        initial = {key: config.get(key) for key in cls.CONFIG_FIELDS}
        if initial["prompt_template"] is None:
            initial["prompt_template"] = "{prompt}"
        targets = config.get("target_modules", "attention")
        if isinstance(targets, list):
            initial.update(target_preset="custom", target_custom=", ".join(targets))
        else:
            initial["target_preset"] = targets
        return {**initial, **inputs}

    def launch_arguments(self) -> dict:
        data = self.cleaned_data
        config = {key: data[key] for key in self.CONFIG_FIELDS}
        if not config["prompt_template"]:
            config["prompt_template"] = "{prompt}"
        if data["target_preset"] == "custom":
            config["target_modules"] = [name.strip() for name in data["target_custom"].split(",") if name.strip()]
        else:
            config["target_modules"] = data["target_preset"]
        return {"name": data["name"], "priority": data["priority"], "base_model": data["base_model"],
                "dataset_version": data["dataset_version"],
                "train_split": data["train_split"], "eval_split": data["eval_split"], "config": config}

    def field_for(self, service_field: str | None) -> str | None:
        """The form field a service error names (`config.batch_size` -> batch_size)."""
        name = (service_field or "").removeprefix("config.")
        if name == "target_modules":
            return "target_custom" if self.data.get("target_preset") == "custom" else "target_preset"
        return name if name in self.fields else None
