# The simulated NVML: libnvidia-ml.so.1 in GPUSLICE_SIM_LIB_DIR, over the
# device model. Included from src/sim/CMakeLists.txt (paths are relative to src/sim). See docs/SIMULATOR.md, "Simulated NVML".
# Its tests with real CUDA processes are in tests/sim/nvml.cmake.

# The entry points as objects, shared by the library and by the unit test
# (which calls them in-process).
add_library(gpuslice_sim_nvml_objects OBJECT
  nvml/nvml_context.cc
  nvml/nvml_device.cc
  nvml/nvml_errors.cc
  nvml/nvml_health.cc
  nvml/nvml_gpm.cc
  nvml/nvml_mig.cc
  nvml/nvml_pci.cc
  nvml/nvml_system.cc
)
set_target_properties(gpuslice_sim_nvml_objects PROPERTIES
  POSITION_INDEPENDENT_CODE ON
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)
target_link_libraries(gpuslice_sim_nvml_objects PUBLIC gpuslice_sim_model)
gpuslice_warnings(gpuslice_sim_nvml_objects)

# Exports exactly the NVML symbols (GPUSLICE_NVML_EXPORT + the version
# script); the device model and the C++ runtime parts it pulls in stay local.
add_library(gpuslice_sim_nvml SHARED $<TARGET_OBJECTS:gpuslice_sim_nvml_objects>)
set_target_properties(gpuslice_sim_nvml PROPERTIES
  OUTPUT_NAME nvidia-ml
  SOVERSION 1
  LIBRARY_OUTPUT_DIRECTORY ${GPUSLICE_SIM_LIB_DIR}
  LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/nvml/nvml_exports.map)
target_link_libraries(gpuslice_sim_nvml PRIVATE gpuslice_sim_model)
gpuslice_old_glibc(gpuslice_sim_nvml)
target_link_options(gpuslice_sim_nvml PRIVATE
  -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/nvml/nvml_exports.map
  -Wl,--no-undefined)

gpuslice_test(sim_nvml_test
  SOURCES nvml/nvml_test.cc nvml/nvml_pci_test.cc nvml/nvml_health_test.cc
  LIBS gpuslice_sim_nvml_objects)
