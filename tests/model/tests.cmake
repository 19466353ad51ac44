# Tests of the built-in model (models/) and of `zinc train` / `zinc plot`. Label: model.
#   model_grad    backward vs finite differences (fp32 and a double build of the same source)
#   model_flash_rows  the CUDA model's fast attention rows on the host against gpt.c's
#   model_flash_tiles  its tensor-core attention tiles on the host against the attention in double
#   model_colsum  its fast mode's two-pass column sums and embedding buckets on the host
#   model_data    data sources: entropy rate of the synthetic chain, file formats, rejections
#   model_train   4 ranks, ZeRO-3, bf16: the loss goes from ln 256 to near the entropy floor
#   model_resume  train -> save -> resume == uninterrupted, bit for bit (needs zinc_ckpt_*)
#   model_cli     the zinc executable: exit 2 on bad input, metrics, resume, plot
#   model_plot    zinc plot at the edges of the values (no nan in the SVG), --log and losses <= 0
#   train_selfcheck_interrupt  the demo in $TMPDIR, its directory removed on SIGINT (exit 130)
set(ZINC_MODEL_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
if(TARGET zinc_models)
  zinc_test(NAME model_grad SOURCES ${ZINC_MODEL_TEST_DIR}/test_model_grad.c
            ${ZINC_MODEL_TEST_DIR}/grad_double.c LIBS zinc_models LABELS model TIMEOUT 60)
  target_include_directories(model_grad PRIVATE ${ZINC_MODEL_TEST_DIR})
  # The CUDA model's fast attention rows (models/cuda/flash_rows.h) on the host against gpt.c.
  zinc_test(NAME model_flash_rows SOURCES ${ZINC_MODEL_TEST_DIR}/test_flash_rows.c
            LIBS zinc_models LABELS model TIMEOUT 60)
  # Its tensor-core attention tiles (models/cuda/flash_tiles.h) on the host, within a derived bound.
  zinc_test(NAME model_flash_tiles SOURCES ${ZINC_MODEL_TEST_DIR}/test_flash_tiles.c
            LIBS zinc_models LABELS model TIMEOUT 60)
  # Its fast mode's column reductions (models/cuda/colsum.h): partition, bounds, embedding order.
  zinc_test(NAME model_colsum SOURCES ${ZINC_MODEL_TEST_DIR}/test_colsum.c LABELS model
            TIMEOUT 60)
  zinc_test(NAME model_data SOURCES ${ZINC_MODEL_TEST_DIR}/test_model_data.c
            LIBS zinc_models LABELS model TIMEOUT 60)
  zinc_test(NAME model_train SOURCES ${ZINC_MODEL_TEST_DIR}/test_model_train.c
            ${ZINC_MODEL_TEST_DIR}/trainer.c LIBS zinc_models LABELS "model;multirank" TIMEOUT 120)
  target_include_directories(model_train PRIVATE ${ZINC_MODEL_TEST_DIR})
  zinc_test(NAME model_resume SOURCES ${ZINC_MODEL_TEST_DIR}/test_model_resume.c
            ${ZINC_MODEL_TEST_DIR}/trainer.c LIBS zinc_models LABELS "model;multirank;ckpt"
            TIMEOUT 120)
  target_include_directories(model_resume PRIVATE ${ZINC_MODEL_TEST_DIR})
  zinc_test(NAME model_cli SOURCES ${ZINC_MODEL_TEST_DIR}/test_model_cli.c
            LABELS model TIMEOUT 120)
  add_dependencies(model_cli zinc_cli)
  target_compile_definitions(model_cli PRIVATE ZINC_CLI="$<TARGET_FILE:zinc_cli>")
endif()

if(ZINC_HAVE_MPI)
  add_test(NAME model_mpi_loss
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/mpi_loss_test.sh $<TARGET_FILE:zinc_cli>
                   ${MPIEXEC_EXECUTABLE} ${CMAKE_SOURCE_DIR}/configs/zero2_bf16.json)
  set_tests_properties(model_mpi_loss PROPERTIES LABELS "model;multirank" TIMEOUT 120
                       ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
  # Options that differ between the ranks (--steps, --save-dir, ...): exit 2 naming them.
  add_test(NAME model_mpi_args
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/mpi_args_test.sh $<TARGET_FILE:zinc_cli>
                   ${MPIEXEC_EXECUTABLE} ${CMAKE_SOURCE_DIR}/configs/zero2_bf16.json)
  set_tests_properties(model_mpi_args PROPERTIES LABELS "model;multirank" TIMEOUT 600
                       ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
  # The same runs through the staged comm over MPI (ranks sharing one GPU under mpirun), on the
  # cpu device through ZINC_TEST_STAGED_COMM=1: the losses and weights of the plain mpi comm.
  add_test(NAME model_mpi_staged
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/mpi_staged_test.sh $<TARGET_FILE:zinc_cli>
                   ${MPIEXEC_EXECUTABLE} ${CMAKE_SOURCE_DIR}/configs)
  set_tests_properties(model_mpi_staged PROPERTIES LABELS "model;multirank" TIMEOUT 300
                       ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
endif()

# configs/*.json: accepted without a warning; the offload configs train like the others.
add_test(NAME model_configs COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/configs_test.sh
         $<TARGET_FILE:zinc_cli> ${CMAKE_SOURCE_DIR}/configs)
set_tests_properties(model_configs PROPERTIES LABELS model TIMEOUT 120)

# SIGINT/SIGTERM: the ranks stop together after the step in progress, save it, exit 130.
add_test(NAME model_interrupt COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/interrupt_test.sh
         $<TARGET_FILE:zinc_cli>)
set_tests_properties(model_interrupt PROPERTIES LABELS model TIMEOUT 400)

# bench/gpu_compare.py kernels (the e2e phase's fast-against-exact check) on CPU metrics files.
add_test(NAME model_gpu_compare COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/gpu_compare_test.sh
         $<TARGET_FILE:zinc_cli> ${CMAKE_SOURCE_DIR}/bench/gpu_compare.py)
set_tests_properties(model_gpu_compare PROPERTIES LABELS model TIMEOUT 60 SKIP_RETURN_CODE 77)

# zinc plot at the edges: +-1e308 losses and steps, equal huge losses (no nan/inf in the SVG);
# --log with losses <= 0 (counted on stderr, or refused when nothing is left).
add_test(NAME model_plot COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/plot_test.sh $<TARGET_FILE:zinc_cli>)
set_tests_properties(model_plot PROPERTIES LABELS model TIMEOUT 60)

# The demo (`zinc` alone) in $TMPDIR, its checkpoint directory removed when SIGINT stops it (130).
add_test(NAME train_selfcheck_interrupt COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/demo_interrupt_test.sh
         $<TARGET_FILE:zinc_cli>)
set_tests_properties(train_selfcheck_interrupt PROPERTIES LABELS model TIMEOUT 700)
