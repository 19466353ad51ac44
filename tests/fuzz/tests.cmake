# Fuzz targets, one per parser (docs/testing.md): the config, the checkpoint manifest and rank
# file, the safetensors header, and base/json_strict. Each fuzz_<t>.c is one
# LLVMFuzzerTestOneInput. `make test` replays the seed corpus through it with replay.c's main()
# (any compiler; label fuzz); `make fuzz` builds the same sources with clang's libFuzzer
# (-DZINC_FUZZ=ON) and runs each for FUZZ_SECONDS (tests/fuzz/run.sh).
#
# Seeds: tests/fuzz/corpus/<t>/ (valid and broken inputs, and every crash found so far, kept as a
# regression test); the config targets also replay the config test corpus and configs/.
set(ZF ${CMAKE_CURRENT_LIST_DIR})
set(ZINC_FUZZ_TARGETS config manifest safetensors json_strict)
set(ZINC_FUZZ_EXTRA_config ${CMAKE_SOURCE_DIR}/tests/config/corpus ${CMAKE_SOURCE_DIR}/configs)
set(ZINC_FUZZ_EXTRA_json_strict ${CMAKE_SOURCE_DIR}/tests/config/corpus)

foreach(t ${ZINC_FUZZ_TARGETS})
  zinc_test(NAME fuzz_${t}_replay SOURCES ${ZF}/replay.c ${ZF}/fuzz_${t}.c LABELS fuzz TIMEOUT 120
            ARGS ${ZF}/corpus/${t} ${ZINC_FUZZ_EXTRA_${t}})
endforeach()

if(ZINC_HAVE_LIBFUZZER)
  add_custom_target(fuzz_targets)
  foreach(t ${ZINC_FUZZ_TARGETS})
    add_executable(fuzz_${t} ${ZF}/fuzz_${t}.c)
    target_link_libraries(fuzz_${t} PRIVATE zinc_core)
    target_include_directories(fuzz_${t} PRIVATE ${ZF})
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    add_dependencies(fuzz_targets fuzz_${t})
  endforeach()
endif()
