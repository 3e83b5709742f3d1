# The shim's linker version script, generated at configure time from
# hooks.def (the one list of hooks) and the cuda.h we build against:
# dlsym/dlvsym plus every hook whose `#if CUDA_VERSION >= N` guards hold for
# that header, nothing else. A guarded-out hook has no wrapper in the
# library, so it must not be named here either.
#
# Output: GPUSLICE_VERSION_SCRIPT (libgpuslice.map in the binary directory).
# Plain CMake (no Python): a fresh Debian machine may have nothing else.

set(_cuda_h "${CUDA_INCLUDE_DIR}/cuda.h")
set(_def "${CMAKE_CURRENT_SOURCE_DIR}/hooks.def")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_def}" "${_cuda_h}")

# hooks.def holds three kinds of preprocessor lines: the #ifndef/#define/
# #endif defaults of the two macros, the #undefs at the end, and the
# `#if CUDA_VERSION >= N` guards. Each open #if/#ifndef pushes 1 (skipping)
# or 0 on _stack; anything this reader cannot evaluate is an error rather
# than a silent misreading.
file(STRINGS "${_def}" _lines REGEX "^[ \t]*(#|GPUSLICE_(CU|NVML)_HOOK\\()")
set(_stack "")
set(_exports "")
set(_count 0)
foreach(_line IN LISTS _lines)
  if(_line MATCHES "^[ \t]*#[ \t]*if[ \t]+CUDA_VERSION[ \t]*>=[ \t]*([0-9]+)[ \t]*$")
    if(GPUSLICE_CUDA_H_VERSION LESS CMAKE_MATCH_1)
      list(APPEND _stack 1)
    else()
      list(APPEND _stack 0)
    endif()
  elseif(_line MATCHES "^[ \t]*#[ \t]*ifn?def[ \t]+GPUSLICE_(CU|NVML)_HOOK[ \t]*$")
    list(APPEND _stack 0)
  elseif(_line MATCHES "^[ \t]*#[ \t]*endif")
    list(LENGTH _stack _depth)
    if(_depth EQUAL 0)
      message(FATAL_ERROR "${_def}: #endif without #if")
    endif()
    list(POP_BACK _stack)
  elseif(_line MATCHES "^[ \t]*#[ \t]*(define|undef)[ \t]")
    # The macros' defaults and clean-up; not hooks.
  elseif(_line MATCHES "^[ \t]*#")
    message(FATAL_ERROR "${_def}: only '#if CUDA_VERSION >= <number>' and '#endif' may "
                        "guard hooks, not '${_line}'")
  elseif(_line MATCHES "^GPUSLICE_[A-Z]+_HOOK\\(([A-Za-z0-9_]+)[,)]")
    if(NOT "1" IN_LIST _stack)
      string(APPEND _exports "    ${CMAKE_MATCH_1};\n")
      math(EXPR _count "${_count} + 1")
    endif()
  else()
    message(FATAL_ERROR "${_def}: cannot read '${_line}'")
  endif()
endforeach()
list(LENGTH _stack _depth)
if(NOT _depth EQUAL 0)
  message(FATAL_ERROR "${_def}: #if without #endif")
endif()
message(STATUS "Shim: cuda.h ${GPUSLICE_CUDA_H_VERSION}, ${_count} hooks exported")

set(GPUSLICE_VERSION_SCRIPT ${CMAKE_CURRENT_BINARY_DIR}/libgpuslice.map)
file(CONFIGURE OUTPUT ${GPUSLICE_VERSION_SCRIPT}
  CONTENT "{\n  global:\n    dlsym;\n    dlvsym;\n${_exports}  local:\n    *;\n};\n")
