# The `import zinc` front-end (python/zinc, ctypes over libzinc.so), label python. The tests need
# a Python that imports torch: Debian's python3-torch installs for /usr/bin/python3, which may not
# be the python3 on PATH, so each candidate is asked. Without one the tests report skipped (77).
set(ZINC_TORCH_PYTHON "" CACHE STRING "Python interpreter with torch for the python tests")
if(NOT ZINC_TORCH_PYTHON)
  foreach(_c /usr/bin/python3 python3)
    execute_process(COMMAND ${_c} -c "import torch" RESULT_VARIABLE _r OUTPUT_QUIET ERROR_QUIET)
    if(_r EQUAL 0)
      set(ZINC_TORCH_PYTHON ${_c})
      break()
    endif()
  endforeach()
endif()
set(_pyt ${CMAKE_CURRENT_LIST_DIR})
set(_why "no Python with torch (install python3-torch)")
if(ZINC_SANITIZE)
  # A sanitizer build's libzinc needs the sanitizer runtime loaded first, which a Python
  # interpreter does not do: these tests run in the normal build only.
  set(ZINC_TORCH_PYTHON "")
  set(_why "not in a sanitizer build (python does not load the ASan runtime first)")
endif()
if(ZINC_TORCH_PYTHON)
  set(_py ${ZINC_TORCH_PYTHON})
else()
  set(_py sh -c "echo 'SKIP: ${_why}'; exit 77" --)
endif()
set(_env "ZINC_LIB=$<TARGET_FILE:zinc>;OMPI_MCA_btl_vader_single_copy_mechanism=none")

# python_<name>: `script ARGS...` under the package's environment, label python, exit 77 a skip.
function(zinc_python_test name timeout script)
  add_test(NAME python_${name} COMMAND ${_py} ${_pyt}/${script} ${ARGN})
  set_tests_properties(python_${name} PROPERTIES LABELS python TIMEOUT ${timeout}
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
endfunction()
# python_<name>_stage<s>: `script STAGE`, for each stage given after the timeout.
function(zinc_python_stage_tests name script timeout)
  foreach(_s ${ARGN})
    zinc_python_test(${name}_stage${_s} ${timeout} ${script} ${_s})
  endforeach()
endfunction()
zinc_python_stage_tests(parity test_torch_parity.py 300 0 1 2 3)
# a trained parameter frozen after initialize: warned once, trained on (test_frozen_after_init.py)
zinc_python_stage_tests(frozen_after_init test_frozen_after_init.py 120 0 1 2 3)
add_test(NAME python_parity_bf16_stage2 COMMAND ${_py} ${_pyt}/test_torch_parity.py 2 bf16)
set_tests_properties(python_parity_bf16_stage2 PROPERTIES LABELS python TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# Stage 3's gather/release and the hand-over during backward (test_torch_stage3.py says how
# each fails): memory, the reuse distance, overlap at stages 2-3, the odd model at every stage,
# config warnings.
add_test(NAME python_stage3_memory COMMAND ${_py} ${_pyt}/test_torch_stage3.py memory)
add_test(NAME python_stage3_reuse COMMAND ${_py} ${_pyt}/test_torch_stage3.py reuse)
add_test(NAME python_stage3_persistent COMMAND ${_py} ${_pyt}/test_torch_stage3.py persistent)
# stage 3's frozen parameters in pieces (a frozen engine), bit for bit the run holding them whole
add_test(NAME python_stage3_frozen COMMAND ${_py} ${_pyt}/test_stage3_frozen.py)
# One test per stage of a test_torch_stage3.py mode: python_<mode>_stage<s>.
function(zinc_stage3_script_tests mode)
  foreach(_s ${ARGN})
    add_test(NAME python_${mode}_stage${_s} COMMAND ${_py} ${_pyt}/test_torch_stage3.py ${mode} ${_s})
    set_tests_properties(python_${mode}_stage${_s} PROPERTIES LABELS python TIMEOUT 300
                         SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  endforeach()
endfunction()
zinc_stage3_script_tests(overlap 2 3)
zinc_stage3_script_tests(odd 0 1 2 3)
# Activation checkpointing (torch.utils.checkpoint both ways, zinc.checkpointing): parity with
# plain torch, and at stage 3 the recomputation gathers and releases.
zinc_stage3_script_tests(actckpt 0 2 3)
# A module run in several reentrant checkpointing segments: its gradient's later contributions
# come after its hand-over (zinc_grads_more; test_shared_segments.py).
zinc_python_stage_tests(shared_segments test_shared_segments.py 300 0 1 2 3)
# A backward that raises midway (training goes on, as plain torch's `.grad` keeps its part) and
# a second backward without step() (refused before anything is added; test_interrupted_backward.py).
zinc_python_stage_tests(interrupted_backward test_interrupted_backward.py 300 0 1 2 3)
# loss.backward() called directly (DeepSpeed 0.19.8's torch-style backward at stages 1-3, refused at
# 0): bit for bit engine.backward's, fp16 through engine.scale (test_direct_backward.py).
zinc_python_stage_tests(direct_backward test_direct_backward.py 300 0 1 2 3)
# A Ctrl-C right after each zinc call of an iteration, and the exceptions that left wrong values
# (zero_grad after a failed backward, a step after a backward without grad_fn, a load after a
# failed stage-3 pass, a GatheredParameters block that raised): test_ctrl_c.py.
zinc_python_stage_tests(ctrl_c test_ctrl_c.py 300 0 1 2 3)
# model_parameters as param groups with their own weight decay (zinc_group_set_weight_decay).
zinc_stage3_script_tests(groups 0 1 2 3)
# A client torch.optim.AdamW / Adam (it replaces the config's optimizer), a client LR scheduler,
# lr written into param_groups by the loop.
zinc_stage3_script_tests(client 0 2 3)
add_test(NAME python_config_warnings COMMAND ${_py} ${_pyt}/test_torch_stage3.py warnings)
set_tests_properties(python_stage3_memory python_stage3_reuse python_stage3_persistent
                     python_stage3_frozen
                     python_config_warnings PROPERTIES LABELS python
                     TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
add_test(NAME python_errors COMMAND ${_py} ${_pyt}/test_torch_ckpt.py errors ${CMAKE_CURRENT_BINARY_DIR}/py_errors)
add_test(NAME python_ckpt_warmstart
         COMMAND ${_py} ${_pyt}/test_torch_ckpt.py warmstart ${CMAKE_CURRENT_BINARY_DIR}/py_warm)
add_test(NAME python_ckpt_scheduler
         COMMAND ${_py} ${_pyt}/test_torch_ckpt.py scheduled ${CMAKE_CURRENT_BINARY_DIR}/py_sched)
set_tests_properties(python_errors python_ckpt_warmstart python_ckpt_scheduler PROPERTIES LABELS python TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
zinc_python_test(ckpt_save_latest 120 test_torch_ckpt.py save_latest
                 ${CMAKE_CURRENT_BINARY_DIR}/py_save_latest)
# DeepSpeed's methods besides the loop (test_torch_api.py): module_state_dict, save_16bit_model,
# is_gradient_accumulation_boundary, device, local_rank, ... at stage 1 and at stage 3.
foreach(_s 1 3)
  add_test(NAME python_torch_api_stage${_s}
           COMMAND ${_py} ${_pyt}/test_torch_api.py ${_s} ${CMAKE_CURRENT_BINARY_DIR}/py_api${_s})
  set_tests_properties(python_torch_api_stage${_s} PROPERTIES LABELS python TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
endforeach()
# zinc.zero (GatheredParameters, Init) and initialize taking rank 0's parameters
# (test_torch_zero.py).
zinc_python_stage_tests(zero test_torch_zero.py 120 0 1 2 3)
# zinc.zero.Init under torchrun's environment (no MPI): its broadcasts through torch.distributed
# (gloo here); the script starts its own 2 ranks.
add_test(NAME python_zero_torchrun COMMAND ${_py} ${_pyt}/test_torch_zero_torchrun.py)
set_tests_properties(python_zero_torchrun PROPERTIES LABELS "python;multirank" TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# zinc.comm at 2 ranks under torchrun's environment (test_comm.py starts them): gloo's
# all_gather_into_tensor, the rank, and the accelerator's backend name beside torch.distributed's.
add_test(NAME python_comm_torchrun COMMAND ${_py} ${_pyt}/test_comm.py)
set_tests_properties(python_comm_torchrun PROPERTIES LABELS "python;multirank" TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# zinc.zero.Init around a model that initialises its weights as transformers' PreTrainedModel
# does (post_init through Module.smart_apply or Module.apply, by release; test_torch_hf_init.py,
# a stand-in of it).
add_test(NAME python_hf_init COMMAND ${_py} ${_pyt}/test_torch_hf_init.py)
set_tests_properties(python_hf_init PROPERTIES LABELS python TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# torch.distributed set up for the script by initialize, as DeepSpeed's (test_torch_dist.py).
add_test(NAME python_torch_dist COMMAND ${_py} ${_pyt}/test_torch_dist.py)
set_tests_properties(python_torch_dist PROPERTIES LABELS python TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# DeepSpeed's other names under zinc's paths (zinc.accelerator, zinc.comm, zinc.ops.adam,
# zinc.utils, zinc.runtime.zero) and `python -m zinc.as_deepspeed` (test_ds_names.py): the names
# in one process, then ds_script.py run unedited, with zinc's names and as plain zinc.
add_test(NAME python_ds_names COMMAND ${_py} ${_pyt}/test_ds_names.py api)
foreach(_s 1 3)
  add_test(NAME python_ds_script_stage${_s} COMMAND ${_py} ${_pyt}/test_ds_names.py runs ${_s})
endforeach()
set_tests_properties(python_ds_names python_ds_script_stage1 python_ds_script_stage3 PROPERTIES
                     LABELS python TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# A client optimizer's Adam settings (bias_correction, fp32_optimizer_states) against Adam
# computed by hand (test_client_adam.py).
add_test(NAME python_client_adam COMMAND ${_py} ${_pyt}/test_client_adam.py)
set_tests_properties(python_client_adam PROPERTIES LABELS python TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# DeepSpeed's monitors (csv_monitor, tensorboard, wandb) on the Python front-end
# (test_monitor.py).
add_test(NAME python_monitor COMMAND ${_py} ${_pyt}/test_monitor.py ${CMAKE_CURRENT_BINARY_DIR}/py_monitor)
set_tests_properties(python_monitor PROPERTIES LABELS python TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# The data loader of initialize(training_data=...) and deepspeed_io (test_torch_data.py).
add_test(NAME python_data COMMAND ${_py} ${_pyt}/test_torch_data.py)
set_tests_properties(python_data PROPERTIES LABELS python TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# zinc.utils.zero_to_fp32: a checkpoint consolidated into a torch state_dict without an engine
# (test_zero_to_fp32.py STAGE DTYPE DIR).
foreach(_c "1;fp32" "3;bf16")
  list(GET _c 0 _s)
  list(GET _c 1 _t)
  add_test(NAME python_zero_to_fp32_${_t}_stage${_s}
           COMMAND ${_py} ${_pyt}/test_zero_to_fp32.py ${_s} ${_t}
                   ${CMAKE_CURRENT_BINARY_DIR}/py_z2f_${_t}${_s}/ckpt)
  set_tests_properties(python_zero_to_fp32_${_t}_stage${_s} PROPERTIES LABELS "python;ckpt"
                       TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
endforeach()
# zinc.utils' safe_get_full_fp32_param / safe_set_full_fp32_param (test_tensor_fragment.py).
foreach(_c "1;fp32" "3;bf16")
  list(GET _c 0 _s)
  list(GET _c 1 _t)
  add_test(NAME python_tensor_fragment_${_t}_stage${_s}
           COMMAND ${_py} ${_pyt}/test_tensor_fragment.py ${_s} ${_t})
  set_tests_properties(python_tensor_fragment_${_t}_stage${_s} PROPERTIES LABELS python
                       TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
endforeach()
# An exception that stops a backward half way: the process still exits, with its status
# (test_exit.py: torch 1.13 hung at exit, torch 2.x crashed, while views held Python objects).
foreach(_s 1 3)
  add_test(NAME python_exit_after_error_stage${_s} COMMAND ${_py} ${_pyt}/test_exit.py ${_s})
  set_tests_properties(python_exit_after_error_stage${_s} PROPERTIES LABELS python TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
endforeach()
# The sys.excepthook zinc chains in worlds of several ranks, called directly (test_exit.py hook);
# python_uncaught_mpi runs it for real.
add_test(NAME python_uncaught_hook COMMAND ${_py} ${_pyt}/test_exit.py hook)
set_tests_properties(python_uncaught_hook PROPERTIES LABELS python TIMEOUT 60
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# The model on a CUDA device (test_torch_cuda.py; label gpu): skipped (77) where torch has no
# CUDA device, which includes CI's Debian torch 1.13 (a CPU build). Its checks also run on the
# CPU device, so the script itself is exercised where there is no GPU.
add_test(NAME python_torch_cuda COMMAND ${_py} ${_pyt}/test_torch_cuda.py)
set_tests_properties(python_torch_cuda PROPERTIES LABELS "gpu;python" TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# stage 3's frozen engine with the model on the GPU (its own stream; label gpu, skipped without)
add_test(NAME python_stage3_frozen_cuda COMMAND ${_py} ${_pyt}/test_stage3_frozen.py)
set_tests_properties(python_stage3_frozen_cuda PROPERTIES LABELS "gpu;python" TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env};ZINC_TEST_DEVICE=cuda")
add_test(NAME python_torch_cuda_on_cpu COMMAND ${_py} ${_pyt}/test_torch_cuda.py --cpu)
set_tests_properties(python_torch_cuda_on_cpu PROPERTIES LABELS python TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")

# DeepSpeed checkpoints loaded as they are, without DeepSpeed (test_ds_import.py): the fixtures
# in ds_fixtures/ were written by DeepSpeed 0.19.8 itself (make_fixtures.py, 2 ranks); each is
# loaded by zinc at another ZeRO stage than DeepSpeed's and checked against what DeepSpeed held
# (expected.json), then trained on to DeepSpeed's own later weights.
foreach(_c "s0_fp32;3" "s0_bf16;2" "s1_fp32;2" "s1_bf16;0" "s1_bf16_fp32acc;3" "s2_fp32;3"
           "s2_bf16;1" "s3_fp32;1" "s3_bf16;2" "u2_fp32;0" "u3_bf16;3" "s2_fp16;3"
           "s0_fp32_fused;3" "s0_bf16_fused;1" "s3_fp32_frozen;1" "s0_fp32_step0;2"
           "s2_fp32_step0;3" "s3_fp32_step0;1" "s0_fp32_groups;2" "s2_fp32_groups;3")
  list(GET _c 0 _f)
  list(GET _c 1 _s)
  add_test(NAME python_ds_import_${_f} COMMAND ${_py} ${_pyt}/test_ds_import.py load ${_f} ${_s})
  set_tests_properties(python_ds_import_${_f} PROPERTIES LABELS "python;ckpt" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
endforeach()
# python -m zinc.utils.from_deepspeed: the zinc checkpoint it writes passes `zinc ckpt verify`
# and loads (engine, zero_to_fp32) with DeepSpeed's values.
foreach(_f s3_bf16 u2_fp32 s3_fp32_frozen s2_fp32_groups)
  add_test(NAME python_ds_convert_${_f}
           COMMAND ${_py} ${_pyt}/test_ds_import.py convert ${_f}
                   ${CMAKE_CURRENT_BINARY_DIR}/py_ds_convert_${_f} $<TARGET_FILE:zinc_cli>)
  set_tests_properties(python_ds_convert_${_f} PROPERTIES LABELS "python;ckpt" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
endforeach()
# from_deepspeed then to_deepspeed: the universal checkpoint holds DeepSpeed's values and zinc
# resumes it to DeepSpeed's later weights.
foreach(_c "s2_fp32;3" "s3_bf16;0" "s2_fp32_groups;1")
  list(GET _c 0 _f)
  list(GET _c 1 _s)
  add_test(NAME python_ds_export_${_f}
           COMMAND ${_py} ${_pyt}/test_ds_import.py export ${_f}
                   ${CMAKE_CURRENT_BINARY_DIR}/py_ds_export_${_f} ${_s})
  set_tests_properties(python_ds_export_${_f} PROPERTIES LABELS "python;ckpt" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
endforeach()
add_test(NAME python_ds_import_refused
         COMMAND ${_py} ${_pyt}/test_ds_import.py refuse ${CMAKE_CURRENT_BINARY_DIR}/py_ds_refuse)
set_tests_properties(python_ds_import_refused PROPERTIES LABELS "python;ckpt" TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# The checkpoint's param groups (lr, betas, eps, weight decay) are the optimizer's after the
# load, as DeepSpeed's load gives them back; another group count is refused.
add_test(NAME python_ds_import_groups COMMAND ${_py} ${_pyt}/test_ds_import.py groups)
set_tests_properties(python_ds_import_groups PROPERTIES LABELS "python;ckpt" TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# client_state under each load flag: DeepSpeed's keys (ds_fixtures/client_state.json).
add_test(NAME python_ds_import_client COMMAND ${_py} ${_pyt}/test_ds_import.py client)
set_tests_properties(python_ds_import_client PROPERTIES LABELS "python;ckpt" TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# A 16-bit checkpoint into an engine of another precision: a module-only or optimizer-less load
# makes each master from the saved 16-bit weight, as DeepSpeed's.
add_test(NAME python_ds_import_xprec COMMAND ${_py} ${_pyt}/test_ds_import.py xprec)
set_tests_properties(python_ds_import_xprec PROPERTIES LABELS "python;ckpt" TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# Every file of a DeepSpeed checkpoint read once, by the reader and by from_deepspeed, which
# holds one copy of the state at a time.
add_test(NAME python_ds_read_once
         COMMAND ${_py} ${_pyt}/test_ds_import.py reads ${CMAKE_CURRENT_BINARY_DIR}/py_ds_reads)
set_tests_properties(python_ds_read_once PROPERTIES LABELS "python;ckpt" TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")

if(ZINC_HAVE_MPI AND ZINC_TORCH_PYTHON)
  set(_mpi ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe)
  # python_<name>_mpi_stage<s>: `script STAGE` under mpirun -np 2, for each stage given.
  function(zinc_python_mpi_stage_tests name script timeout)
    foreach(_s ${ARGN})
      add_test(NAME python_${name}_mpi_stage${_s}
               COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/${script} ${_s})
      set_tests_properties(python_${name}_mpi_stage${_s} PROPERTIES LABELS "python;multirank"
                           TIMEOUT ${timeout} SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
    endforeach()
  endfunction()
  zinc_python_mpi_stage_tests(parity test_torch_parity.py 300 2 3)
  zinc_python_mpi_stage_tests(direct_backward test_direct_backward.py 300 2 3)
  # The staged comm over MPI that ranks sharing a GPU get, here on the cpu device through
  # ZINC_TEST_STAGED_COMM=1 (test_torch_staged.py): the plain mpi run's losses and weights, bit
  # for bit. Its --cuda mode is bench/gpu_session.sh's mpi2 phase.
  zinc_python_mpi_stage_tests(staged test_torch_staged.py 300 1 3)
  zinc_python_mpi_stage_tests(shared_segments test_shared_segments.py 300 2 3)
  # stage 0's `.grad` at a window's end, averaged over 2 ranks (zinc_grads_reduce)
  zinc_python_mpi_stage_tests(window_grads test_window_grads.py 300 0)
  # engine.offload_states() / reload_states() at 2 ranks: each rank's state away and back
  zinc_python_mpi_stage_tests(offload_states test_offload_states.py 300 1 3)
  # custom_load_fn at 2 ranks, stages 1 and 3: rank 0's changes taken, the ranks agree
  add_test(NAME python_custom_load_mpi
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_custom_load.py mpi)
  set_tests_properties(python_custom_load_mpi PROPERTIES LABELS "python;multirank" TIMEOUT 300
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  add_test(NAME python_stage3_memory_mpi
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_stage3.py memory)
  # Under 2 ranks one rank's fragment of the parameter set between a forward and its backward
  # is empty: it must drop its kept groups too (else its backward skips gathers: a hang).
  add_test(NAME python_stage3_reuse_mpi
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_stage3.py reuse)
  add_test(NAME python_stage3_persistent_mpi
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_stage3.py persistent)
  add_test(NAME python_stage3_frozen_mpi
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_stage3_frozen.py)
  add_test(NAME python_overlap_mpi_stage3
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_stage3.py overlap 3)
  add_test(NAME python_odd_mpi_stage3
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_stage3.py odd 3)
  add_test(NAME python_actckpt_mpi_stage3
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_stage3.py actckpt 3)
  add_test(NAME python_groups_mpi_stage3
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_stage3.py groups 3)
  add_test(NAME python_client_mpi_stage3
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_stage3.py client 3)
  set_tests_properties(python_stage3_memory_mpi python_stage3_reuse_mpi
                       python_stage3_persistent_mpi python_stage3_frozen_mpi
                       python_overlap_mpi_stage3 python_odd_mpi_stage3
                       python_actckpt_mpi_stage3 python_groups_mpi_stage3
                       python_client_mpi_stage3
                       PROPERTIES LABELS "python;multirank" TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${_env}")
  zinc_python_mpi_stage_tests(zero test_torch_zero.py 120 1 3)
  # ds_script.py the three ways under mpirun -np 2 (test_ds_names.py runs).
  add_test(NAME python_ds_script_mpi_stage3
           COMMAND ${_py} ${_pyt}/test_ds_names.py runs 3 ${_mpi} ${MPIEXEC_NUMPROC_FLAG})
  set_tests_properties(python_ds_script_mpi_stage3 PROPERTIES LABELS "python;multirank"
                       TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  add_test(NAME python_monitor_mpi
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_monitor.py
                   ${CMAKE_CURRENT_BINARY_DIR}/py_monitor_mpi)
  set_tests_properties(python_monitor_mpi PROPERTIES LABELS "python;multirank" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  add_test(NAME python_torch_dist_mpi
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_dist.py)
  set_tests_properties(python_torch_dist_mpi PROPERTIES LABELS "python;multirank" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  # examples/torch_gpt.py --zero-init under mpirun -np 2 beside the model built whole (the
  # plain model; transformers' GPT-2 when that package is importable, else skipped).
  add_test(NAME python_example_zero_init_mpi
           COMMAND ${_py} ${_pyt}/test_example.py zero-init gpt ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2)
  add_test(NAME python_example_hf_zero_init_mpi
           COMMAND ${_py} ${_pyt}/test_example.py zero-init hf ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2)
  # A model initialising its weights as transformers' PreTrainedModel does, built in Init.
  add_test(NAME python_hf_init_mpi
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_hf_init.py)
  # Real transformers models (GPT-2, Llama, BERT, T5, OPT) built in Init, and trained at
  # stages 0-3 beside plain torch; skipped without transformers (CI has none; docs/python.md gives the runs with three releases of it).
  add_test(NAME python_hf_models_mpi
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_hf_models.py)
  set_tests_properties(python_example_zero_init_mpi python_example_hf_zero_init_mpi
                       python_hf_init_mpi python_hf_models_mpi PROPERTIES LABELS "python;multirank"
                       TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  add_test(NAME python_data_mpi
           COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_data.py)
  set_tests_properties(python_data_mpi PROPERTIES LABELS "python;multirank" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  foreach(_c "3;bf16" "2;fp32")
    list(GET _c 0 _s)
    list(GET _c 1 _t)
    add_test(NAME python_tensor_fragment_mpi_${_t}_stage${_s}
             COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_tensor_fragment.py
                     ${_s} ${_t})
    set_tests_properties(python_tensor_fragment_mpi_${_t}_stage${_s} PROPERTIES
                         LABELS "python;multirank" TIMEOUT 120 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${_env}")
  endforeach()
  foreach(_c "3;fp32" "2;bf16")
    list(GET _c 0 _s)
    list(GET _c 1 _t)
    add_test(NAME python_zero_to_fp32_mpi_${_t}_stage${_s}
             COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_zero_to_fp32.py ${_s}
                     ${_t} ${CMAKE_CURRENT_BINARY_DIR}/py_z2f_mpi_${_t}${_s}/ckpt)
    set_tests_properties(python_zero_to_fp32_mpi_${_t}_stage${_s} PROPERTIES
                         LABELS "python;multirank;ckpt" TIMEOUT 120 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${_env}")
  endforeach()
  # DeepSpeed's 2-rank checkpoints at zinc's 2 and 4 ranks (zinc reshards them itself).
  # s0_bf16: Adam's lead (one step ahead of the applied ones) on every rank, and its continuation.
  # s3_fp32_frozen: the frozen parameter put together from the pieces, at zinc stage 3 on 2 ranks.
  foreach(_c "s2_fp32;3;2" "s3_bf16;1;2" "s1_fp32;2;4" "s0_bf16;1;2" "s3_fp32_frozen;3;2")
    list(GET _c 0 _f)
    list(GET _c 1 _s)
    list(GET _c 2 _n)
    add_test(NAME python_ds_import_mpi${_n}_${_f}
             COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} ${_n} ${_py} ${_pyt}/test_ds_import.py load
                     ${_f} ${_s})
    set_tests_properties(python_ds_import_mpi${_n}_${_f} PROPERTIES
                         LABELS "python;multirank;ckpt" TIMEOUT 300 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${_env}")
  endforeach()
  foreach(_s 1 3)
    add_test(NAME python_torch_api_mpi_stage${_s}
             COMMAND ${_mpi} ${MPIEXEC_NUMPROC_FLAG} 2 ${_py} ${_pyt}/test_torch_api.py ${_s}
                     ${CMAKE_CURRENT_BINARY_DIR}/py_api_mpi${_s})
    set_tests_properties(python_torch_api_mpi_stage${_s} PROPERTIES LABELS "python;multirank"
                         TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  endforeach()
  # An exception nothing catches on rank 1 aborts the world (zinc's sys.excepthook): rank 0
  # raises ZINC_ERR_ABORTED naming it instead of waiting out comm_timeout_s.
  add_test(NAME python_uncaught_mpi
           COMMAND ${_py} ${_pyt}/test_exit.py uncaught ${_mpi} ${MPIEXEC_NUMPROC_FLAG})
  set_tests_properties(python_uncaught_mpi PROPERTIES LABELS "python;multirank;fault"
                       TIMEOUT 150 SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  # An exception before any engine exists (test_exit.py early): on one rank, rank 0's engine
  # creation fails naming it, or, with rank 0 busy outside zinc, the job still ends (MPI_Abort
  # after the grace, instead of MPI_Finalize waiting forever); on every rank it ends normally;
  # an engine created after zinc_world_abort fails on every rank; a rank that calls sys.exit
  # stops rank 0's engine creation or world broadcast with its exit notice.
  foreach(_w one busy all engine quit quit-bcast)
    add_test(NAME python_early_${_w}_mpi
             COMMAND ${_py} ${_pyt}/test_exit.py early ${_w} ${_mpi} ${MPIEXEC_NUMPROC_FLAG})
    set_tests_properties(python_early_${_w}_mpi PROPERTIES LABELS "python;multirank;fault"
                         TIMEOUT 150 SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  endforeach()
  # A rank that catches an error and calls sys.exit: its exit notice stops rank 0's step with
  # ZINC_ERR_ABORTED naming it, not ZINC_ERR_TIMEOUT after comm_timeout_s (test_exit.py leave).
  add_test(NAME python_leave_mpi
           COMMAND ${_py} ${_pyt}/test_exit.py leave ${_mpi} ${MPIEXEC_NUMPROC_FLAG})
  set_tests_properties(python_leave_mpi PROPERTIES LABELS "python;multirank;fault"
                       TIMEOUT 180 SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  # The same with a save_checkpoint on rank 0: its error says not every rank is in the save (it
  # blamed "the previous background save", which did not exist).
  add_test(NAME python_leave_save_mpi
           COMMAND ${_py} ${_pyt}/test_exit.py leave-save ${_mpi} ${MPIEXEC_NUMPROC_FLAG})
  set_tests_properties(python_leave_save_mpi PROPERTIES LABELS "python;multirank;fault"
                       TIMEOUT 180 SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  # Save at 4 ranks, resume at 2: one test (the second needs the first's checkpoint).
  set(_d ${CMAKE_CURRENT_BINARY_DIR}/py_ckpt)
  string(REPLACE ";" " " _mpis "${_mpi}")
  add_test(NAME python_ckpt_4to2 COMMAND sh -c
           "rm -rf '${_d}' && mkdir -p '${_d}' && ${_mpis} ${MPIEXEC_NUMPROC_FLAG} 4 '${_py}' '${_pyt}/test_torch_ckpt.py' save '${_d}' && ${_mpis} ${MPIEXEC_NUMPROC_FLAG} 2 '${_py}' '${_pyt}/test_torch_ckpt.py' resume '${_d}' && '$<TARGET_FILE:zinc_cli>' ckpt verify '${_d}'")
  set_tests_properties(python_ckpt_4to2 PROPERTIES LABELS "python;multirank;ckpt" TIMEOUT 300
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
endif()

# examples/torch_gpt.py as the README runs it (the plain model; transformers' GPT-2 when that
# package is importable, else skipped): the loss must fall.
add_test(NAME python_example COMMAND ${_py} ${_pyt}/test_example.py gpt)
add_test(NAME python_example_hf COMMAND ${_py} ${_pyt}/test_example.py hf)
add_test(NAME python_example_actckpt
         COMMAND ${_py} ${_pyt}/test_example.py gpt --activation-checkpointing)
add_test(NAME python_example_hf_actckpt
         COMMAND ${_py} ${_pyt}/test_example.py hf --activation-checkpointing)
set_tests_properties(python_example python_example_hf python_example_actckpt
                     python_example_hf_actckpt PROPERTIES LABELS python TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# zinc's gradient buffer lent by torch per accumulation window, not held through the forward.
add_test(NAME python_grad_buffer COMMAND ${_py} ${_pyt}/test_grad_buffer.py)
set_tests_properties(python_grad_buffer PROPERTIES LABELS python TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# One host wait per optimizer step through the front-end (issue 38): stage 3's gathers and the
# stream hand-overs are events, counted on the cpu device as on a GPU (zinc_host_waits).
add_test(NAME python_host_waits COMMAND ${_py} ${_pyt}/test_host_waits.py)
set_tests_properties(python_host_waits PROPERTIES LABELS python TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
# zinc.plan(): `zinc plan` from a script, the CLI's JSON for the same flags (issue 41).
add_test(NAME python_plan COMMAND ${_py} ${_pyt}/test_plan.py)
set_tests_properties(python_plan PROPERTIES LABELS python TIMEOUT 120 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${_env};ZINC_CLI=$<TARGET_FILE:zinc_cli>")
# pyflakes over the front-end and the GPU benchmark: their CUDA-only branches run on no CI
# machine, so a name they use without importing it (seen in review: torch in _handover.py's
# bucket events) would otherwise surface only on a lent GPU. Skipped without pyflakes.
add_test(NAME python_lint COMMAND sh -c "python3 -m pyflakes --version >/dev/null 2>&1 || \
{ echo 'SKIP: no pyflakes (apt-get install python3-pyflakes)'; exit 77; }; \
python3 -m pyflakes \"$0/python/zinc\" \"$0/bench/gpu_torch.py\" \"$0/bench/bench.py\"" ${PROJECT_SOURCE_DIR})
set_tests_properties(python_lint PROPERTIES LABELS "python;unit" TIMEOUT 120 SKIP_RETURN_CODE 77)
# engine.offload_states() / reload_states() (DeepSpeed's): the optimizer state in host memory
# between steps, bit for bit the same training after it comes back (test_offload_states.py).
zinc_python_stage_tests(offload_states test_offload_states.py 300 0 1 2 3)
# load_checkpoint inside an accumulation window: that window's gradients are dropped and training
# goes on as after a load into a fresh engine, bit for bit (test_load_in_window.py).
zinc_python_stage_tests(load_in_window test_load_in_window.py 300 0 1 2 3)
# What the front-end keeps alive: an engine dropped without close() is freed (stage 3's
# parameter hooks held it for good), and a load or save leaves no buffer in a reference cycle
# (test_lifetime.py).
add_test(NAME python_lifetime COMMAND ${_py} ${_pyt}/test_lifetime.py)
set_tests_properties(python_lifetime PROPERTIES LABELS python TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${_env}")
# DeepSpeed's engine details a script sees (test_ds_step_details.py): an lr written under the
# config's scheduler for one step, was_step_applied and micro_steps, a fresh window after loading
# a checkpoint saved inside one.
zinc_python_stage_tests(ds_step_details test_ds_step_details.py 300 0 1 2 3)
# DeepSpeed's scheduler classes (zinc.runtime.lr_schedules) against DeepSpeed 0.19.8's own,
# recorded in ds_fixtures/lr_schedules.json, and driving an engine, also by DeepSpeed's callable
# form over the config's optimizer (test_lr_schedules.py).
foreach(_m ds engine)
  add_test(NAME python_lr_schedules_${_m} COMMAND ${_py} ${_pyt}/test_lr_schedules.py ${_m})
  set_tests_properties(python_lr_schedules_${_m} PROPERTIES LABELS python TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
endforeach()
# `.grad` between backward and step where DeepSpeed keeps it (stage 0, stage 1 inside a window):
# zinc's view of the window's sum, read and changed by the script (test_window_grads.py).
zinc_python_stage_tests(window_grads test_window_grads.py 300 0 1)

# ZeRO stage 0 with fp16/bf16 trains as DeepSpeed 0.19.8's from its first step (its optimizers'
# Adam step on zero gradients when built): losses and fp32 masters against DeepSpeed's own,
# recorded in ds_fixtures/stage0_first_step.json (test_ds_stage0_first_step.py).
# engine.compile() at stages 0-2 against the uncompiled engine (torch 2.2 or later: a skip on
# CI's torch 1.13, where python_torch_api checks the refusal)
zinc_python_test(compile 600 test_torch_compile.py)
zinc_python_test(ds_stage0_first_step 120 test_ds_stage0_first_step.py)
# load_checkpoint(load_optimizer_states=False / load_lr_scheduler_states=False /
# load_module_only=True) and the config scheduler's load_state_dict train on as DeepSpeed's: lr
# (and OneCycle's beta1) per window, counters, losses and fp32 masters against DeepSpeed's own,
# ds_fixtures/load_flags.json (test_ds_load_flags.py).
zinc_python_test(ds_load_flags 180 test_ds_load_flags.py)
# load_checkpoint(custom_load_fn=...): a function that renames the checkpoint's keys for a
# renamed model, and one that edits what it loaded, with each flag at stages 0-3: lr per window,
# counters, losses, fp32 masters and buffers against DeepSpeed's own,
# ds_fixtures/custom_load.json (test_custom_load.py); zinc's checkpoints and DeepSpeed's.
zinc_python_test(custom_load 180 test_custom_load.py)
# zinc.utils.zero_to_fp32 on DeepSpeed's checkpoint folders: DeepSpeed's own zero_to_fp32's
# keys and tensors (ds_fixtures/zero_to_fp32.json; test_ds_zero_to_fp32.py).
zinc_python_test(ds_zero_to_fp32 120 test_ds_zero_to_fp32.py)
