"""zinc.runtime.lr_schedules — DeepSpeed's deepspeed.runtime.lr_schedules (0.19.8) for its
schedule names: the `scheduler.type` values of a config, which zinc's config honours
(docs/config.md, "scheduler"). Hugging Face's accelerate reads VALID_LR_SCHEDULES to tell a
DeepSpeed scheduler from the script's own. The scheduler classes are not offered: zinc runs the
config's schedule in its engine (engine.lr_scheduler is its view of it)."""
LR_RANGE_TEST = "LRRangeTest"
ONE_CYCLE = "OneCycle"
WARMUP_LR = "WarmupLR"
WARMUP_DECAY_LR = "WarmupDecayLR"
WARMUP_COSINE_LR = "WarmupCosineLR"
VALID_LR_SCHEDULES = [LR_RANGE_TEST, ONE_CYCLE, WARMUP_LR, WARMUP_DECAY_LR, WARMUP_COSINE_LR]

__all__ = ["VALID_LR_SCHEDULES", "LR_RANGE_TEST", "ONE_CYCLE", "WARMUP_LR", "WARMUP_DECAY_LR",
           "WARMUP_COSINE_LR"]
