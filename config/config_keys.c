/*
 * config_keys.c — every key DeepSpeed knows, sorted into zinc's three classes.
 *
 * DeepSpeed silently ignores keys it does not know and keys of features that are off; zinc is
 * stricter: a key nobody knows is an error with a did-you-mean suggestion (a misspelt
 * stage3_param_persistence_threshold must not pass unnoticed), a feature that only changes speed,
 * memory placement or logging is accepted with one warning, and a feature that changes the math
 * is rejected. docs/config.md lists the same tables; keep the two in step.
 *
 * The key names follow deepspeed/runtime/config.py, constants.py, zero/config.py,
 * zero/offload_config.py, precision_config.py, monitor/config.py and lr_schedules.py.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/suggest.h"
#include "config/config_internal.h"

#define ZK_SET(var, path, arr) const zkeyset var = {path, arr, (int)(sizeof arr / sizeof arr[0])}

/* Reasons shared by several keys. */
#define W_MONITOR "a monitor zinc does not implement (logging only); zinc writes CSV via csv_monitor"
/* tensorboard and wandb: the Python front-end writes them through the user's package
 * (python/zinc/_monitor.py, which drops this warning); zinc train does not. */
#define W_MONITOR_PY "zinc train does not write this monitor (logging only; the Python front-end does); it writes CSV via csv_monitor"
#define W_NO_EFFECT_OPT "zinc runs only its own Adam/AdamW, so this has no effect"
/* Features DeepSpeed 0.19.8 removed: its config refuses the key whatever its value
 * (config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS, _REMOVED_ZERO_CONFIG_KEYS), so zinc does too. */
#define W_REMOVED " from DeepSpeed: 0.19.8 refuses any config holding the key (deepspeedai/DeepSpeed#8489)"

static const zkey top_keys[] = {
    {"train_batch_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"train_micro_batch_size_per_gpu", ZK_OWN, ZK_ALWAYS, NULL},
    {"gradient_accumulation_steps", ZK_OWN, ZK_ALWAYS, NULL},
    {"gradient_clipping", ZK_OWN, ZK_ALWAYS, NULL},
    {"steps_per_print", ZK_OWN, ZK_ALWAYS, NULL},
    {"prescale_gradients", ZK_OWN, ZK_ALWAYS, NULL},
    {"gradient_predivide_factor", ZK_OWN, ZK_ALWAYS, NULL},
    {"communication_data_type", ZK_OWN, ZK_ALWAYS, NULL},
    {"gradient_allreduce_op", ZK_OWN, ZK_ALWAYS, NULL},
    {"wall_clock_breakdown", ZK_OWN, ZK_ALWAYS, NULL}, /* warns when true (zc_parse_scalars) */
    {"dataloader_drop_last", ZK_OWN, ZK_ALWAYS, NULL}, /* the Python front-end's data loader */
    {"managed_gradient_accumulation", ZK_OWN, ZK_ALWAYS, NULL},
    {"fp16", ZK_OWN, ZK_ALWAYS, NULL},
    {"bf16", ZK_OWN, ZK_ALWAYS, NULL},
    {"bfloat16", ZK_OWN, ZK_ALWAYS, NULL},
    {"optimizer", ZK_OWN, ZK_ALWAYS, NULL},
    {"scheduler", ZK_OWN, ZK_ALWAYS, NULL},
    {"zero_optimization", ZK_OWN, ZK_ALWAYS, NULL},
    {"checkpoint", ZK_OWN, ZK_ALWAYS, NULL},
    {"csv_monitor", ZK_OWN, ZK_ALWAYS, NULL},
    {"data_types", ZK_OWN, ZK_ALWAYS, NULL},
    {"sequence_parallel_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"zinc", ZK_OWN, ZK_ALWAYS, NULL},
    /* zinc config check --json's own member, so that its output reads back (compared, not used) */
    {"hash", ZK_OWN, ZK_ALWAYS, NULL},
    /* speed, memory placement or logging only */
    {"tensorboard", ZK_WARN, ZK_IF_ON, W_MONITOR_PY},
    {"wandb", ZK_WARN, ZK_IF_ON, W_MONITOR_PY},
    {"comet", ZK_WARN, ZK_IF_ON, W_MONITOR},
    {"trackio", ZK_WARN, ZK_IF_ON, W_MONITOR},
    {"comms_logger", ZK_WARN, ZK_IF_ON, "communication logging is not implemented (logging only)"},
    {"flops_profiler", ZK_WARN, ZK_IF_ON, "the flops profiler is not implemented (profiling only)"},
    {"memory_breakdown", ZK_WARN, ZK_IF_ON, "memory breakdown logging is not implemented"},
    {"dump_state", ZK_WARN, ZK_IF_ON, "state dumping is not implemented (logging only)"},
    {"disable_python_gc", ZK_WARN, ZK_IF_ON, "Python's garbage collector is left as it is (speed only)"},
    {"timers", ZK_WARN, ZK_IF_ON, "DeepSpeed's timers are not implemented (logging only)"},
    {"log_level", ZK_WARN, ZK_IF_ON, "zinc's log level is set with ZINC_LOG"},
    {"activation_checkpointing", ZK_WARN, ZK_IF_ON,
     "its options (partitioned, host or contiguous activations) are not implemented; checkpoint "
     "with torch.utils.checkpoint or zinc.checkpointing (memory only)"},
    {"autotuning", ZK_WARN, ZK_IF_ON, "the autotuner is not implemented (speed only)"},
    {"aio", ZK_OWN, ZK_ALWAYS, NULL},
    {"zero_allow_untested_optimizer", ZK_WARN, ZK_IF_ON, W_NO_EFFECT_OPT},
    {"zero_force_ds_cpu_optimizer", ZK_WARN, ZK_ALWAYS, W_NO_EFFECT_OPT},
    {"disable_allgather", ZK_WARN, ZK_IF_ON, "zinc always all-gathers (same result; speed only)"},
    {"graph_harvesting", ZK_REJECT, ZK_ALWAYS, "graph harvesting was removed" W_REMOVED},
    {"sparse_gradients", ZK_REJECT, ZK_ALWAYS,
     "sparse compression of embedding gradients was removed" W_REMOVED},
    {"vocabulary_size", ZK_WARN, ZK_IF_ON,
     "DeepSpeed only uses it for a tensor-core alignment warning"},
    {"pipeline", ZK_WARN, ZK_IF_ON,
     "zinc is data-parallel only; pipeline keys only act with a PipelineModule"},
    {"nebula", ZK_REJECT, ZK_ALWAYS, "Nebula checkpointing was removed" W_REMOVED},
    {"datastates_ckpt", ZK_WARN, ZK_IF_ON,
     "DataStates asynchronous checkpointing is not implemented (speed only; see zinc.ckpt_async)"},
    {"casync_ckpt", ZK_WARN, ZK_IF_ON,
     "asynchronous checkpointing engines are not implemented (speed only; see zinc.ckpt_async)"},
    {"compile", ZK_WARN, ZK_IF_ON, "torch.compile settings have no meaning in zinc (speed only)"},
    {"hybrid_engine", ZK_WARN, ZK_IF_ON, "the RLHF hybrid inference engine is not implemented"},
    {"use_data_before_expert_parallelism", ZK_WARN, ZK_IF_ON,
     "zinc has no expert parallelism (rank topology only)"},
    /* warned about in zc_parse_scalars, only where the value is one DeepSpeed takes */
    {"seq_parallel_communication_data_type", ZK_OWN, ZK_ALWAYS, NULL},
    {"seq_parallel_comm_data_type", ZK_WARN, ZK_IF_ON,
     "zinc has no sequence parallelism, so this has no effect"},
    /* features that change the math */
    {"amp", ZK_REJECT, ZK_ALWAYS, "Apex AMP (use fp16 or bf16) was removed" W_REMOVED},
    {"torch_autocast", ZK_REJECT, ZK_IF_ON,
     "torch autocast changes the precision of the model's math; use fp16 or bf16"},
    {"compression_training", ZK_REJECT, ZK_ALWAYS,
     "the compression library (quantization, pruning) was removed" W_REMOVED},
    {"quantize_training", ZK_REJECT, ZK_ALWAYS, "quantized training (MoQ) was removed" W_REMOVED},
    {"weight_quantization", ZK_REJECT, ZK_IF_ON,
     "weight quantization changes the math and is not implemented"},
    {"eigenvalue", ZK_REJECT, ZK_ALWAYS, "eigenvalue-driven quantization was removed" W_REMOVED},
    {"progressive_layer_drop", ZK_REJECT, ZK_ALWAYS, "progressive layer drop was removed" W_REMOVED},
    {"curriculum_learning", ZK_REJECT, ZK_ALWAYS,
     "the top-level curriculum_learning (data_efficiency.data_sampling has it) was removed"
     W_REMOVED},
    {"data_efficiency", ZK_REJECT, ZK_IF_ON,
     "data sampling and routing change the training data and are not implemented"},
    {"sparse_attention", ZK_REJECT, ZK_ALWAYS, "sparse attention was removed" W_REMOVED},
    {"elasticity", ZK_REJECT, ZK_ALWAYS,
     "elastic training (give the batch sizes explicitly) was removed" W_REMOVED},
    {"tensor_parallel", ZK_REJECT, ZK_IF_ON,
     "zinc has no tensor parallelism (it changes how the world splits the batch)"},
    {"expert_parallel", ZK_REJECT, ZK_IF_ON, "zinc has no expert parallelism (MoE)"},
};
ZK_SET(zk_top, "", top_keys);

static const zkey fp16_keys[] = {
    {"enabled", ZK_OWN, ZK_ALWAYS, NULL},
    {"loss_scale", ZK_OWN, ZK_ALWAYS, NULL},
    {"initial_scale_power", ZK_OWN, ZK_ALWAYS, NULL},
    {"loss_scale_window", ZK_OWN, ZK_ALWAYS, NULL},
    {"hysteresis", ZK_OWN, ZK_ALWAYS, NULL},
    {"consecutive_hysteresis", ZK_OWN, ZK_ALWAYS, NULL},
    {"min_loss_scale", ZK_OWN, ZK_ALWAYS, NULL},
    {"fused_mode", ZK_WARN, ZK_ALWAYS, "kernel fusion choice (speed only)"},
    {"auto_cast", ZK_REJECT, ZK_IF_ON,
     "casting the model's inputs changes the model's math; cast them in the model"},
    {"fp16_master_weights_and_grads", ZK_REJECT, ZK_IF_ON,
     "zinc always keeps fp32 master weights; fp16 master weights change the math"},
};
ZK_SET(zk_fp16, "fp16", fp16_keys);

static const zkey bf16_keys[] = {
    {"enabled", ZK_OWN, ZK_ALWAYS, NULL},
    {"immediate_grad_update", ZK_WARN, ZK_IF_ON, "when gradients are copied (speed and memory only)"},
    {"check_grad_overflow", ZK_OWN, ZK_ALWAYS, NULL},
    {"bf16_master_weights_and_grads", ZK_REJECT, ZK_IF_ON,
     "zinc always keeps fp32 master weights; bf16 master weights change the math"},
    {"bf16_optimizer_states", ZK_REJECT, ZK_IF_ON,
     "zinc always keeps fp32 Adam moments; bf16 moments change the math"},
};
ZK_SET(zk_bf16, "bf16", bf16_keys);

static const zkey optimizer_keys[] = {
    {"type", ZK_OWN, ZK_ALWAYS, NULL},
    {"params", ZK_OWN, ZK_ALWAYS, NULL},
    {"legacy_fusion", ZK_WARN, ZK_IF_ON, "kernel fusion choice (speed only)"},
};
ZK_SET(zk_optimizer, "optimizer", optimizer_keys);

static const zkey adam_params_keys[] = {
    {"lr", ZK_OWN, ZK_ALWAYS, NULL},
    {"betas", ZK_OWN, ZK_ALWAYS, NULL},
    {"eps", ZK_OWN, ZK_ALWAYS, NULL},
    {"weight_decay", ZK_OWN, ZK_ALWAYS, NULL},
    {"bias_correction", ZK_OWN, ZK_ALWAYS, NULL},
    {"adam_w_mode", ZK_OWN, ZK_ALWAYS, NULL},
    /* its math is kept: torch's defaults (AdamW's weight_decay 0.01; config_optim.c) */
    {"torch_adam", ZK_WARN, ZK_IF_ON, "zinc's Adam runs, not torch's (speed only); torch's "
                                      "defaults are kept (torch.optim.AdamW's weight_decay "
                                      "0.01 where it is not given)"},
    {"fused", ZK_WARN, ZK_IF_ON, "which Adam kernel runs (speed only; same math)"},
    {"foreach", ZK_WARN, ZK_IF_ON, "which Adam kernel runs (speed only; same math)"},
    {"capturable", ZK_WARN, ZK_IF_ON, "CUDA-graph capture (speed only)"},
    {"differentiable", ZK_WARN, ZK_IF_ON, "autograd through the step has no meaning in zinc"},
    {"set_grad_none", ZK_WARN, ZK_IF_ON, "how gradients are cleared (memory only)"},
    {"amsgrad", ZK_REJECT, ZK_IF_ON, "AMSGrad changes the math and is not implemented"},
    {"maximize", ZK_REJECT, ZK_IF_ON, "maximizing changes the math and is not implemented"},
    {"fp32_optimizer_states", ZK_OWN, ZK_ALWAYS, NULL}, /* zc_check_pairs */
    {"max_grad_norm", ZK_REJECT, ZK_ALWAYS,
     "DeepSpeed rejects it as an optimizer parameter; use the top-level gradient_clipping"},
};
ZK_SET(zk_adam_params, "optimizer.params", adam_params_keys);

static const zkey scheduler_keys[] = {
    {"type", ZK_OWN, ZK_ALWAYS, NULL},
    {"params", ZK_OWN, ZK_ALWAYS, NULL},
};
ZK_SET(zk_scheduler, "scheduler", scheduler_keys);

#define W_LAST_IT {"last_batch_iteration", ZK_OWN, ZK_ALWAYS, NULL}
static const zkey warmup_lr_keys[] = {
    {"warmup_min_lr", ZK_OWN, ZK_ALWAYS, NULL}, {"warmup_max_lr", ZK_OWN, ZK_ALWAYS, NULL},
    {"warmup_num_steps", ZK_OWN, ZK_ALWAYS, NULL}, {"warmup_type", ZK_OWN, ZK_ALWAYS, NULL},
    W_LAST_IT,
};
ZK_SET(zk_warmup_lr, "scheduler.params", warmup_lr_keys);

static const zkey warmup_decay_lr_keys[] = {
    {"warmup_min_lr", ZK_OWN, ZK_ALWAYS, NULL}, {"warmup_max_lr", ZK_OWN, ZK_ALWAYS, NULL},
    {"warmup_num_steps", ZK_OWN, ZK_ALWAYS, NULL}, {"warmup_type", ZK_OWN, ZK_ALWAYS, NULL},
    {"total_num_steps", ZK_OWN, ZK_ALWAYS, NULL}, W_LAST_IT,
};
ZK_SET(zk_warmup_decay_lr, "scheduler.params", warmup_decay_lr_keys);

static const zkey warmup_cosine_lr_keys[] = {
    {"total_num_steps", ZK_OWN, ZK_ALWAYS, NULL}, {"warmup_min_ratio", ZK_OWN, ZK_ALWAYS, NULL},
    {"warmup_num_steps", ZK_OWN, ZK_ALWAYS, NULL}, {"cos_min_ratio", ZK_OWN, ZK_ALWAYS, NULL},
    {"warmup_type", ZK_OWN, ZK_ALWAYS, NULL}, W_LAST_IT,
};
ZK_SET(zk_warmup_cosine_lr, "scheduler.params", warmup_cosine_lr_keys);

static const zkey one_cycle_keys[] = {
    {"cycle_min_lr", ZK_OWN, ZK_ALWAYS, NULL}, {"cycle_max_lr", ZK_OWN, ZK_ALWAYS, NULL},
    {"decay_lr_rate", ZK_OWN, ZK_ALWAYS, NULL}, {"cycle_first_step_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"cycle_second_step_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"cycle_first_stair_count", ZK_OWN, ZK_ALWAYS, NULL},
    {"cycle_second_stair_count", ZK_OWN, ZK_ALWAYS, NULL},
    {"decay_step_size", ZK_OWN, ZK_ALWAYS, NULL}, {"cycle_momentum", ZK_OWN, ZK_ALWAYS, NULL},
    {"cycle_min_mom", ZK_OWN, ZK_ALWAYS, NULL}, {"cycle_max_mom", ZK_OWN, ZK_ALWAYS, NULL},
    {"decay_mom_rate", ZK_OWN, ZK_ALWAYS, NULL}, W_LAST_IT,
};
ZK_SET(zk_one_cycle, "scheduler.params", one_cycle_keys);

static const zkey lr_range_test_keys[] = {
    {"lr_range_test_min_lr", ZK_OWN, ZK_ALWAYS, NULL},
    {"lr_range_test_step_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"lr_range_test_step_rate", ZK_OWN, ZK_ALWAYS, NULL},
    {"lr_range_test_staircase", ZK_OWN, ZK_ALWAYS, NULL}, W_LAST_IT,
};
ZK_SET(zk_lr_range_test, "scheduler.params", lr_range_test_keys);

#define W_STAGE3 "a stage-3 fetch tuning knob zinc does not implement (speed and memory only)"
#define W_OFFLOAD "deprecated and not read: write offload_optimizer.pin_memory (copy speed on CUDA only)"
static const zkey zero_keys[] = {
    {"stage", ZK_OWN, ZK_ALWAYS, NULL},
    /* Read and range-checked by zc_parse_zero, which warns once when one of these speed/memory
     * knobs zinc does not implement has a value other than DeepSpeed's default (reduce and
     * allgather buckets, overlap_comm, contiguous_gradients, reduce_scatter,
     * allgather_partitions, round_robin_gradients, sub_group_size, max_reuse_distance); the
     * other stage-3 keys here are honoured (docs/config.md). */
    {"reduce_bucket_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"allgather_bucket_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"overlap_comm", ZK_OWN, ZK_ALWAYS, NULL},
    {"contiguous_gradients", ZK_OWN, ZK_ALWAYS, NULL},
    {"reduce_scatter", ZK_OWN, ZK_ALWAYS, NULL},
    {"allgather_partitions", ZK_OWN, ZK_ALWAYS, NULL},
    {"round_robin_gradients", ZK_OWN, ZK_ALWAYS, NULL},
    {"sub_group_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"stage3_max_live_parameters", ZK_OWN, ZK_ALWAYS, NULL},
    {"max_live_parameters", ZK_OWN, ZK_ALWAYS, NULL},
    {"stage3_max_reuse_distance", ZK_OWN, ZK_ALWAYS, NULL},
    {"max_reuse_distance", ZK_OWN, ZK_ALWAYS, NULL},
    {"stage3_prefetch_bucket_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"prefetch_bucket_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"stage3_param_persistence_threshold", ZK_OWN, ZK_ALWAYS, NULL},
    {"param_persistence_threshold", ZK_OWN, ZK_ALWAYS, NULL},
    {"stage3_gather_16bit_weights_on_model_save", ZK_OWN, ZK_ALWAYS, NULL},
    {"gather_16bit_weights_on_model_save", ZK_OWN, ZK_ALWAYS, NULL},
    {"stage3_gather_fp16_weights_on_model_save", ZK_OWN, ZK_ALWAYS, NULL},
    {"offload_optimizer", ZK_OWN, ZK_ALWAYS, NULL},
    {"offload_param", ZK_OWN, ZK_ALWAYS, NULL},
    {"cpu_offload", ZK_OWN, ZK_ALWAYS, NULL},
    {"cpu_offload_param", ZK_OWN, ZK_ALWAYS, NULL},
    {"load_from_fp32_weights", ZK_OWN, ZK_ALWAYS, NULL},
    {"zero_hpz_partition_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"mics_shard_size", ZK_REJECT, ZK_ALWAYS, "MiCS was removed" W_REMOVED},
    {"cpu_offload_use_pin_memory", ZK_WARN, ZK_IF_ON, W_OFFLOAD},
    {"stage3_model_persistence_threshold", ZK_WARN, ZK_ALWAYS, W_STAGE3},
    {"model_persistence_threshold", ZK_WARN, ZK_ALWAYS, W_STAGE3},
    {"stage3_module_granularity_threshold", ZK_WARN, ZK_IF_ON, W_STAGE3},
    {"module_granularity_threshold", ZK_WARN, ZK_IF_ON, W_STAGE3},
    {"stage3_use_all_reduce_for_fetch_params", ZK_WARN, ZK_IF_ON, W_STAGE3},
    {"use_all_reduce_for_fetch_params", ZK_WARN, ZK_IF_ON, W_STAGE3},
    {"stage3_allgather_sequential", ZK_WARN, ZK_IF_ON, W_STAGE3},
    {"allgather_sequential", ZK_WARN, ZK_IF_ON, W_STAGE3},
    {"stage3_partition_stream_chunk_size", ZK_WARN, ZK_IF_ON, W_STAGE3},
    {"partition_stream_chunk_size", ZK_WARN, ZK_IF_ON, W_STAGE3},
    {"use_multi_rank_bucket_allreduce", ZK_WARN, ZK_IF_OFF,
     "how buckets are reduced (same sum; speed only)"},
    {"elastic_checkpoint", ZK_WARN, ZK_IF_ON,
     "zinc checkpoints always load at any world size; the flag has no effect"},
    {"ignore_unused_parameters", ZK_WARN, ZK_IF_OFF,
     "zinc does not check for unused parameters (a debugging check only)"},
    {"legacy_stage1", ZK_WARN, ZK_IF_ON, "zinc has one stage-1 implementation (same math)"},
    {"mics_hierarchical_params_gather", ZK_REJECT, ZK_ALWAYS, "MiCS was removed" W_REMOVED},
    {"memory_efficient_linear", ZK_WARN, ZK_IF_OFF, "a PyTorch module detail (memory only)"},
    {"pipeline_loading_checkpoint", ZK_WARN, ZK_IF_ON, "zinc has no pipeline parallelism"},
    {"override_module_apply", ZK_WARN, ZK_IF_OFF, "a PyTorch module detail (no effect in zinc)"},
    {"log_trace_cache_warnings", ZK_WARN, ZK_IF_ON, "zinc has no trace cache (logging only)"},
    {"enable_sanity_checks", ZK_WARN, ZK_IF_ON, "DeepSpeed-internal debugging checks"},
    {"save_muon_momentum_buffer_in_memory", ZK_WARN, ZK_IF_ON, "zinc has no Muon optimizer"},
    {"leaf_module", ZK_WARN, ZK_IF_ON, "a PyTorch module detail (no effect in zinc)"},
    {"parameter_alignment", ZK_WARN, ZK_IF_ON, "padding of DeepSpeed's flat buffers (memory only)"},
    {"compute_grad_norm", ZK_OWN, ZK_ALWAYS, NULL}, /* zc_check_pairs */
    {"zero_quantized_weights", ZK_REJECT, ZK_IF_ON,
     "ZeRO++ quantized weight communication changes the math and is not implemented"},
    {"zero_quantized_nontrainable_weights", ZK_REJECT, ZK_IF_ON,
     "quantized non-trainable weights change the math and are not implemented"},
    {"zero_quantized_gradients", ZK_REJECT, ZK_IF_ON,
     "ZeRO++ quantized gradient communication changes the math and is not implemented"},
    {"zeropp_loco_param", ZK_REJECT, ZK_ALWAYS, "ZeRO++ LoCo was removed" W_REMOVED},
    /* zero/config.py: zenflow: Optional[ZenFlowConfig] = None; "zenflow": {} is ZenFlow with
     * its defaults (runtime/zenflow/engine.py turns it on for any non-None config) */
    {"zenflow", ZK_REJECT, ZK_IF_SET,
     "ZenFlow's delayed CPU updates change the math and are not implemented"},
};
ZK_SET(zk_zero, "zero_optimization", zero_keys);

static const zkey offload_optimizer_keys[] = {
    {"device", ZK_OWN, ZK_ALWAYS, NULL},
    {"nvme_path", ZK_OWN, ZK_ALWAYS, NULL},
    {"buffer_count", ZK_OWN, ZK_ALWAYS, NULL},
    {"pin_memory", ZK_OWN, ZK_ALWAYS, NULL},
    {"pipeline_read", ZK_OWN, ZK_ALWAYS, NULL},
    {"pipeline_write", ZK_OWN, ZK_ALWAYS, NULL},
    {"fast_init", ZK_OWN, ZK_ALWAYS, NULL},
    {"ratio", ZK_OWN, ZK_ALWAYS, NULL},
    {"super_offload", ZK_OWN, ZK_ALWAYS, NULL},
    {"convert_grad_on_cpu", ZK_OWN, ZK_ALWAYS, NULL},
    {"cpuadam_cores_perc", ZK_OWN, ZK_ALWAYS, NULL},
};
ZK_SET(zk_offload_optimizer, "zero_optimization.offload_optimizer", offload_optimizer_keys);

static const zkey offload_param_keys[] = {
    {"device", ZK_OWN, ZK_ALWAYS, NULL},
    {"nvme_path", ZK_OWN, ZK_ALWAYS, NULL},
    {"buffer_count", ZK_OWN, ZK_ALWAYS, NULL},
    {"buffer_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"max_in_cpu", ZK_OWN, ZK_ALWAYS, NULL},
    {"pin_memory", ZK_OWN, ZK_ALWAYS, NULL},
};
ZK_SET(zk_offload_param, "zero_optimization.offload_param", offload_param_keys);

/* tag_validation and load_universal are honoured; use_node_local_storage and
 * parallel_write.pipeline_stage warn when true (zc_parse_checkpoint): every zinc rank always
 * writes its own file to the shared save directory. */
static const zkey checkpoint_keys[] = {
    {"tag_validation", ZK_OWN, ZK_ALWAYS, NULL},
    {"load_universal", ZK_OWN, ZK_ALWAYS, NULL},
    {"use_node_local_storage", ZK_OWN, ZK_ALWAYS, NULL},
    {"parallel_write", ZK_OWN, ZK_ALWAYS, NULL},
    {"writer", ZK_WARN, ZK_IF_ON,
     "DeepSpeed's checkpoint writer engines are not implemented (I/O speed only)"},
    {"serialization", ZK_WARN, ZK_IF_ON, "zinc has its own checkpoint format (docs/)"},
};
ZK_SET(zk_checkpoint, "checkpoint", checkpoint_keys);

static const zkey parallel_write_keys[] = {
    {"pipeline_stage", ZK_OWN, ZK_ALWAYS, NULL},
};
ZK_SET(zk_parallel_write, "checkpoint.parallel_write", parallel_write_keys);

static const zkey zinc_keys[] = {
    {"ckpt_compression_level", ZK_OWN, ZK_ALWAYS, NULL},
    {"ckpt_async", ZK_OWN, ZK_ALWAYS, NULL},
    {"ckpt_keep_last", ZK_OWN, ZK_ALWAYS, NULL},
    {"ckpt_chunk_bytes", ZK_OWN, ZK_ALWAYS, NULL},
    {"comm_timeout_s", ZK_OWN, ZK_ALWAYS, NULL},
    {"grad_buckets", ZK_OWN, ZK_ALWAYS, NULL},
    {"gather_buffers", ZK_OWN, ZK_ALWAYS, NULL},
    {"device_memory_limit", ZK_OWN, ZK_ALWAYS, NULL},
    {"host_memory_limit", ZK_OWN, ZK_ALWAYS, NULL},
    {"nvme_checksum", ZK_OWN, ZK_ALWAYS, NULL},
};
ZK_SET(zk_zinc, "zinc", zinc_keys);

static const zkey csv_monitor_keys[] = {
    {"enabled", ZK_OWN, ZK_ALWAYS, NULL},
    {"output_path", ZK_OWN, ZK_ALWAYS, NULL},
    {"job_name", ZK_OWN, ZK_ALWAYS, NULL},
};
ZK_SET(zk_csv_monitor, "csv_monitor", csv_monitor_keys);

/* DeepSpeed's asynchronous I/O settings for NVMe offload (zc_parse_aio). */
static const zkey aio_keys[] = {
    {"block_size", ZK_OWN, ZK_ALWAYS, NULL},
    {"queue_depth", ZK_OWN, ZK_ALWAYS, NULL},
    {"intra_op_parallelism", ZK_OWN, ZK_ALWAYS, NULL},
    {"single_submit", ZK_OWN, ZK_ALWAYS, NULL},
    {"overlap_events", ZK_OWN, ZK_ALWAYS, NULL},
    {"use_gds", ZK_WARN, ZK_IF_ON,
     "GPUDirect Storage is not implemented: zinc's NVMe I/O goes through host memory (speed only)"},
};
ZK_SET(zk_aio, "aio", aio_keys);

static const zkey data_types_keys[] = {
    {"grad_accum_dtype", ZK_OWN, ZK_ALWAYS, NULL},
    {"param_dtype", ZK_OWN, ZK_ALWAYS, NULL}, /* the working dtype's name only */
    {"buffer_dtype", ZK_REJECT, ZK_IF_ON, "casting module buffers changes the model's math"},
    {"keep_in_fp32_modules", ZK_OWN, ZK_ALWAYS, NULL}, /* "auto" or [] (zc_parse_scalars) */
};
ZK_SET(zk_data_types, "data_types", data_types_keys);

/* Every set, for "this key belongs in another section" hints. */
static const zkeyset *const all_sets[] = {
    &zk_top, &zk_fp16, &zk_bf16, &zk_optimizer, &zk_adam_params, &zk_scheduler, &zk_zero,
    &zk_offload_optimizer, &zk_offload_param, &zk_checkpoint, &zk_zinc, &zk_csv_monitor,
    &zk_aio, &zk_data_types, &zk_warmup_lr, &zk_warmup_decay_lr, &zk_warmup_cosine_lr, &zk_one_cycle,
    &zk_lr_range_test,
};

int zk_is_on(json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null: return 0;
    case json_type_boolean: return json_object_get_boolean(v);
    case json_type_int: return json_object_get_int64(v) != 0;
    case json_type_double: return json_object_get_double(v) != 0.0;
    case json_type_string: {
        const char *s = json_object_get_string(v);
        return s[0] != 0 && strcasecmp(s, "none") != 0 && strcasecmp(s, "false") != 0;
    }
    case json_type_array: return json_object_array_length(v) > 0;
    case json_type_object: {
        json_object *en;
        if (json_object_object_get_ex(v, "enabled", &en)) return zk_is_on(en);
        return json_object_object_length(v) > 0;
    }
    }
    return 1;
}

/* false, or 0 / 0.0, which zc_get_bool reads as false too */
static int is_off(json_object *v)
{
    json_type t = json_object_get_type(v);
    return (t == json_type_boolean || t == json_type_int || t == json_type_double) && !zk_is_on(v);
}

const char *zk_suggest(const char *name, const zkeyset *set)
{
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < set->nkeys; i++) {
        int d = zsuggest_distance(name, set->keys[i].name);
        if (d >= 0 && d < best_d) {
            best_d = d;
            best = set->keys[i].name;
        }
    }
    return best;
}

static const zkey *find_key(const zkeyset *set, const char *name)
{
    for (int i = 0; i < set->nkeys; i++)
        if (strcmp(set->keys[i].name, name) == 0) return &set->keys[i];
    return NULL;
}

static void unknown_key(zcctx *x, const char *path, const char *key, const zkeyset *set)
{
    const char *s = zk_suggest(key, set);
    if (s) {
        zc_error(x, path, "unknown key; did you mean %s?", s);
        return;
    }
    /* A key valid in another section ("stage" at the top level) is a misplaced key. */
    for (size_t i = 0; i < sizeof all_sets / sizeof all_sets[0]; i++) {
        const zkeyset *o = all_sets[i];
        if (o == set || !o->path[0] || !find_key(o, key)) continue;
        if (strcmp(o->path, set->path) == 0)
            /* The same section under another type: a WarmupLR parameter given to OneCycle. */
            zc_error(x, path, "not a parameter of this type (docs/config.md lists each type's)");
        else
            zc_error(x, path, "unknown key here; did you mean %s.%s?", o->path, key);
        return;
    }
    zc_error(x, path, "unknown key (docs/config.md lists every key zinc knows)");
}

void zk_check(zcctx *x, json_object *obj, const char *path, const zkeyset *set)
{
    char kp[512];
    json_object_object_foreach(obj, key, val) {
        zc_path(kp, sizeof kp, path, key);
        const zkey *k = find_key(set, key);
        if (!k) {
            unknown_key(x, kp, key, set);
            continue;
        }
        if (k->cls == ZK_OWN) continue;
        int applies = k->when == ZK_ALWAYS || (k->when == ZK_IF_ON && zk_is_on(val)) ||
                      (k->when == ZK_IF_OFF && is_off(val)) || (k->when == ZK_IF_SET && val);
        if (!applies) continue;
        if (k->cls == ZK_WARN)
            zc_warn(x, kp, "accepted without effect: %s", k->why);
        else
            zc_error(x, kp, "not supported: %s", k->why);
    }
}
