"""_lib.py — the C library under `import zinc`: finding libzinc.so and declaring the calls.

zinc's Python front-end is ctypes over the installed (or just-built) shared library; the engine
does all the work. The library is looked up in this order: $ZINC_LIB, next to this package
(an installed wheel), the build tree of a source checkout (../../build/libzinc.so), then the
system's loader path.
"""
import ctypes
import ctypes.util
import os

ZINC_OK = 0
ZINC_ERR_INVALID_ARG = 1   # include/zinc.h: an argument is out of range
ZINC_ERR_COMM = 6      # include/zinc.h: a collective failed in the comm backend
ZINC_ERR_TIMEOUT = 7   # include/zinc.h: a collective did not complete within the timeout
ZINC_ERR_ABORTED = 8   # include/zinc.h: another rank failed or called zinc_world_abort
ZINC_ERR_MISMATCH = 9   # include/zinc.h: ranks disagree
ZINC_ERR_UNSUPPORTED = 10   # include/zinc.h: a feature this build or this zinc does not have
# zinc_mem_category's names in its order (include/zinc.h): zinc_memory's array indices.
MEM_CATEGORIES = ("param16", "grad", "master", "adam_m", "adam_v", "bucket", "gather")


class ZincError(RuntimeError):
    """An error reported by the zinc engine; the message is zinc's own (what, where, what to do)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class EngineOptions(ctypes.Structure):
    _fields_ = [("config_path", ctypes.c_char_p), ("config_json", ctypes.c_char_p),
                ("world", ctypes.c_void_p), ("rank", ctypes.c_int),
                ("device", ctypes.c_char_p), ("threads", ctypes.c_int)]


class StepInfo(ctypes.Structure):
    _fields_ = [("boundary", ctypes.c_int), ("applied", ctypes.c_int), ("skipped", ctypes.c_int),
                ("step", ctypes.c_int64), ("skipped_total", ctypes.c_int64),
                ("grad_norm", ctypes.c_double), ("grad_norm_clipped", ctypes.c_double),
                ("loss_scale", ctypes.c_double), ("next_loss_scale", ctypes.c_double),
                ("lr", ctypes.c_double)]


class SaveOptions(ctypes.Structure):
    _fields_ = [("client_blob", ctypes.c_void_p), ("client_blob_bytes", ctypes.c_size_t),
                ("save_weights16", ctypes.c_int), ("async_", ctypes.c_int),
                ("leave_latest", ctypes.c_int)]


class LoadOptions(ctypes.Structure):
    _fields_ = [("weights_only", ctypes.c_int), ("client_blob", ctypes.c_void_p),
                ("client_blob_cap", ctypes.c_size_t), ("client_blob_bytes", ctypes.c_size_t),
                ("loaded_tag", ctypes.c_char * 256), ("missing_ok", ctypes.c_int),
                ("missing", ctypes.c_int), ("keep_optimizer", ctypes.c_int),
                ("caller_reads_extra", ctypes.c_int), ("extra", ctypes.c_int)]


class TrainState(ctypes.Structure):
    """zinc_train_state_t (include/zinc.h): counters and loss scaler set from outside a zinc
    checkpoint (the DeepSpeed import)."""
    _fields_ = [("applied", ctypes.c_int64), ("skipped", ctypes.c_int64),
                ("scaler_scale", ctypes.c_double), ("scaler_hysteresis", ctypes.c_int),
                ("scaler_iter", ctypes.c_int64), ("scaler_last_overflow_iter", ctypes.c_int64)]


class TensorRequest(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("ndim", ctypes.c_int), ("out", ctypes.c_void_p), ("found", ctypes.c_int)]


def _find():
    cands = []
    if os.environ.get("ZINC_LIB"):
        cands.append(os.environ["ZINC_LIB"])
    here = os.path.dirname(os.path.abspath(__file__))
    cands.append(os.path.join(here, "libzinc.so"))
    cands.append(os.path.join(here, "..", "..", "build", "libzinc.so"))
    found = ctypes.util.find_library("zinc")
    if found:
        cands.append(found)
    for c in cands:
        if os.path.exists(c) or c == found:
            try:
                return ctypes.CDLL(c, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue
    raise ImportError("zinc: libzinc.so not found (looked in: " + ", ".join(cands) +
                      "); build it (make) or set ZINC_LIB to its path")


lib = _find()

_sig = {
    "zinc_version_string": (ctypes.c_char_p, []),
    "zinc_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "zinc_world_create_launched": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]),
    "zinc_world_destroy": (None, [ctypes.c_void_p]),
    "zinc_world_size": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_world_rank": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_world_abort": (None, [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p]),
    "zinc_world_barrier": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_world_broadcast": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.c_int]),
    "zinc_engine_create": (ctypes.c_int, [ctypes.POINTER(EngineOptions), ctypes.POINTER(ctypes.c_void_p)]),
    "zinc_engine_destroy": (None, [ctypes.c_void_p]),
    "zinc_memory_hold": (ctypes.c_void_p, [ctypes.c_void_p]),
    "zinc_memory_release": (None, [ctypes.c_void_p]),
    "zinc_states_offload": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint, ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_uint64)]),
    "zinc_states_reload": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_states_offloaded": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_param_get_working": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
    "zinc_last_error": (ctypes.c_char_p, [ctypes.c_void_p]),
    "zinc_config_warnings": (ctypes.c_char_p, [ctypes.c_void_p]),
    "zinc_engine_config_json": (ctypes.c_char_p, [ctypes.c_void_p]),
    "zinc_engine_loss_scale": (ctypes.c_double, [ctypes.c_void_p]),
    "zinc_group_add": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
    "zinc_group_set_weight_decay": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_double]),
    "zinc_group_set_betas": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_double,
                                            ctypes.c_double]),
    "zinc_group_set_eps": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_double]),
    "zinc_param_add": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                                      ctypes.POINTER(ctypes.c_int64), ctypes.c_int,
                                      ctypes.POINTER(ctypes.c_int)]),
    "zinc_finalize": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_grad_buffer_external": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_engine_frozen": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_engine_param_count": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_grad_buffer_attach": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]),
    "zinc_param_set": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
    "zinc_param_get": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
    "zinc_param_state_get": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                            ctypes.c_void_p]),
    "zinc_param_state_set": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                            ctypes.c_void_p]),
    "zinc_param_grad_get": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
    "zinc_param_local_range": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int,
                                              ctypes.POINTER(ctypes.c_int64),
                                              ctypes.POINTER(ctypes.c_int64)]),
    "zinc_param_local_get": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                            ctypes.c_void_p]),
    "zinc_param_local_set": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                            ctypes.c_void_p]),
    "zinc_param_grad_set": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
    "zinc_param_data": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]),
    "zinc_param_grad": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]),
    "zinc_grads_ready": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "zinc_grads_more": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "zinc_grad_bucket": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]),
    "zinc_grad_bucket_drop": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "zinc_grads_clear": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_gather": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "zinc_release": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "zinc_stream_wait_gather": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
    "zinc_loss_multiplier": (ctypes.c_float, [ctypes.c_void_p]),
    "zinc_step": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(StepInfo)]),
    "zinc_micro_step": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_set_accumulation_boundary": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "zinc_set_batch_size": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]),
    "zinc_set_lr": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_double]),
    "zinc_set_betas": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_double, ctypes.c_double]),
    "zinc_group_set_lr": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_double]),
    "zinc_engine_rank": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_engine_world_size": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_engine_stage": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_engine_grads_bucketed": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_group_persistent": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "zinc_engine_dtype": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_engine_at_boundary": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_engine_lr": (ctypes.c_double, [ctypes.c_void_p]),
    "zinc_engine_betas": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double),
                                         ctypes.POINTER(ctypes.c_double)]),
    "zinc_grads_reduce": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_schedule_eval": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_double, ctypes.c_int64,
                                          ctypes.POINTER(ctypes.c_double),
                                          ctypes.POINTER(ctypes.c_double),
                                          ctypes.POINTER(ctypes.c_double),
                                          ctypes.POINTER(ctypes.c_int)]),
    "zinc_engine_gather_16bit_on_save": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_engine_set_train_state": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(TrainState)]),
    "zinc_engine_set_adam_lead": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64]),
    "zinc_engine_adam_lead": (ctypes.c_int64, [ctypes.c_void_p]),
    "zinc_engine_set_sched_lead": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64]),
    "zinc_engine_sched_lead": (ctypes.c_int64, [ctypes.c_void_p]),
    "zinc_engine_steps": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64),
                                         ctypes.POINTER(ctypes.c_int64)]),
    "zinc_ckpt_save": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.POINTER(SaveOptions)]),
    "zinc_ckpt_wait": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_ckpt_load": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.POINTER(LoadOptions)]),
    "zinc_ckpt_read_tensors": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                              ctypes.POINTER(TensorRequest), ctypes.c_int]),
    "zinc_ckpt_find_tag": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                          ctypes.POINTER(ctypes.c_size_t)]),
    "zinc_memory": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
                                   ctypes.POINTER(ctypes.c_uint64)]),
    "zinc_mean_over_ranks": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double),
                                            ctypes.c_int]),
    "zinc_broadcast": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                      ctypes.c_int]),
    "zinc_engine_sync": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_host_waits": (ctypes.c_uint64, [ctypes.c_void_p]),
    "zinc_engine_cuda_stream": (ctypes.c_void_p, [ctypes.c_void_p]),
    "zinc_engine_cuda_device": (ctypes.c_int, [ctypes.c_void_p]),
    "zinc_engine_comm": (ctypes.c_char_p, [ctypes.c_void_p]),
}
for _name, (_res, _args) in _sig.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


def check(status, engine=None):
    """Raises ZincError with zinc's message when status is not ZINC_OK."""
    if status != ZINC_OK:
        msg = lib.zinc_last_error(engine).decode(errors="replace")
        name = lib.zinc_status_string(status).decode()
        raise ZincError(status, f"{name}: {msg}" if msg else name)


def read_tensors(engine, checkpoint_dir, tag, wanted):
    """zinc_ckpt_read_tensors, one read for all of `wanted`, a list of (name, shape, out): the
    fp32 master of each read into out (a float32 CPU tensor of that shape; None: only ask whether
    the checkpoint holds it). engine None reads without one (tag None: latest's, as a load picks it).
    Returns whether the checkpoint holds each tensor."""
    shapes = [(ctypes.c_int64 * max(len(dims), 1))(*dims) for _, dims, _ in wanted]
    req = (TensorRequest * max(len(wanted), 1))(*[
        TensorRequest(n.encode(), shape, len(dims), None if out is None else out.data_ptr(), 0)
        for (n, dims, out), shape in zip(wanted, shapes)])
    check(lib.zinc_ckpt_read_tensors(engine, os.fsencode(checkpoint_dir),
                                     None if tag is None else tag.encode(), req, len(wanted)),
          engine)
    return [bool(req[i].found) for i in range(len(wanted))]
