# NVML against real processes on the simulated GPU: the simulated
# libnvidia-ml.so.1, loaded by soname like a real program would, observing
# CUDA programs that use the simulated libcuda.so.1.
#
# Included from tests/sim/CMakeLists.txt.
include_guard(GLOBAL)

# A CUDA driver-API program, linked like ordinary CUDA programs against the
# toolkit's stub (SONAME libcuda.so.1): the loader picks the simulated driver
# from LD_LIBRARY_PATH at run time.
add_executable(nvml_cuda_peer ${CMAKE_CURRENT_LIST_DIR}/nvml_cuda_peer.cc)
gpuslice_warnings(nvml_cuda_peer)
target_include_directories(nvml_cuda_peer PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(nvml_cuda_peer PRIVATE cuda_headers cuda_driver_stub)

gpuslice_test(sim_nvml_agreement_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/nvml_agreement_test.cc
  LIBS ${CMAKE_DL_LIBS}
  ENV "LD_LIBRARY_PATH=$<TARGET_FILE_DIR:gpuslice_sim_nvml>")
target_include_directories(sim_nvml_agreement_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
# Paths as compile definitions, so the binary also runs by hand (ENV applies
# only under ctest).
target_compile_definitions(sim_nvml_agreement_test PRIVATE
  "GPUSLICE_TEST_NVML_LIBRARY=\"$<TARGET_FILE:gpuslice_sim_nvml>\""
  "GPUSLICE_TEST_CUDA_PEER=\"$<TARGET_FILE:nvml_cuda_peer>\"")
# The test loads these at run time; building it must build them.
add_dependencies(sim_nvml_agreement_test gpuslice_sim_nvml gpuslice_sim_cuda nvml_cuda_peer)
