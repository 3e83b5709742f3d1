# The simulated driver's exported symbols, generated at configure time from
# two inputs (see docs/SIMULATOR.md, "Exported entry points"):
#
#   driver/entry_points.def  what the simulator implements: the one list.
#   cuda.h (CUDA_INCLUDE_DIR) every CUresult-returning driver entry point of
#                             the header we build against.
#
# Outputs, in the current binary directory:
#   cuda_exports.map   linker version script: implemented + stubs, nothing else.
#   cuda_stubs.inc     CU_STUB(symbol, base, rank, per_thread) per entry point
#                      of cuda.h the simulator lacks; driver/api_stubs.cc makes
#                      each one a function returning CUDA_ERROR_NOT_SUPPORTED.
#
# Plain CMake (no Python): a fresh Debian machine may have nothing else.

set(_cuda_h "${CUDA_INCLUDE_DIR}/cuda.h")
set(_def "${CMAKE_CURRENT_SOURCE_DIR}/driver/entry_points.def")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_def}" "${_cuda_h}")

# GPUSLICE_CUDA_H_VERSION (top-level CMakeLists.txt) evaluates the .def's guards.
# Implemented symbols: the .def's entries, keeping only those whose guards
# hold. The .def may use exactly `#if CUDA_VERSION >= <number>` and `#endif`
# (nestable) around entries; anything else is an error rather than a silent
# misreading.
file(STRINGS "${_def}" _def_lines REGEX "^[ \t]*(#|CU_)")
set(_implemented "")
set(_skip_depth 0)   # > 0 while inside a guard that does not hold.
set(_depth 0)
foreach(_line IN LISTS _def_lines)
  if(_line MATCHES "^[ \t]*#[ \t]*if[ \t]+CUDA_VERSION[ \t]*>=[ \t]*([0-9]+)[ \t]*$")
    math(EXPR _depth "${_depth} + 1")
    if(_skip_depth GREATER 0 OR GPUSLICE_CUDA_H_VERSION LESS CMAKE_MATCH_1)
      math(EXPR _skip_depth "${_skip_depth} + 1")
    endif()
  elseif(_line MATCHES "^[ \t]*#[ \t]*endif")
    if(_depth EQUAL 0)
      message(FATAL_ERROR "${_def}: #endif without #if")
    endif()
    math(EXPR _depth "${_depth} - 1")
    if(_skip_depth GREATER 0)
      math(EXPR _skip_depth "${_skip_depth} - 1")
    endif()
  elseif(_line MATCHES "^[ \t]*#")
    message(FATAL_ERROR "${_def}: only '#if CUDA_VERSION >= <number>' and '#endif' are "
                        "understood, not '${_line}'")
  elseif(_line MATCHES "^CU_(ENTRY|PTDS)\\([A-Za-z0-9_]+, *[0-9]+, *([A-Za-z0-9_]+)\\)")
    if(_skip_depth EQUAL 0)
      list(APPEND _implemented ${CMAKE_MATCH_2})
    endif()
  else()
    message(FATAL_ERROR "${_def}: cannot read '${_line}'")
  endif()
endforeach()
if(NOT _depth EQUAL 0)
  message(FATAL_ERROR "${_def}: #if without #endif")
endif()

# Every symbol cuda.h stands for. Declarations (`CUresult CUDAAPI name(`, the
# name sometimes on the next line, hence a regex over the whole text rather
# than per line) give the names as written; the renaming macros
# (`#define cuFoo cuFoo_v2`, `#define cuFoo __CUDA_API_PTDS(cuFoo_v2)`) give
# the versioned and per-thread-stream symbols those names become.
file(READ "${_cuda_h}" _text)
string(REGEX MATCHALL "CUresult[ \t\r\n]+CUDAAPI[ \t\r\n]+cu[A-Za-z0-9_]+[ \t\r\n]*\\("
       _decls "${_text}")
string(REGEX MATCHALL
       "#[ \t]*define[ \t]+cu[A-Za-z0-9_]+[ \t]+(__CUDA_API_PT(DS|SZ)\\([ \t]*)?cu[A-Za-z0-9_]+"
       _renames "${_text}")
unset(_text)
set(_symbols "")
foreach(_d IN LISTS _decls)
  string(REGEX MATCH "cu[A-Za-z0-9_]+[ \t\r\n]*\\($" _name "${_d}")
  string(REGEX REPLACE "[ \t\r\n]*\\($" "" _name "${_name}")
  list(APPEND _symbols ${_name})
endforeach()
foreach(_r IN LISTS _renames)
  if(_r MATCHES "__CUDA_API_PT(DS|SZ)\\([ \t]*(cu[A-Za-z0-9_]+)$")
    string(TOLOWER "${CMAKE_MATCH_1}" _suffix)
    list(APPEND _symbols ${CMAKE_MATCH_2} ${CMAKE_MATCH_2}_pt${_suffix})
  elseif(_r MATCHES "[ \t](cu[A-Za-z0-9_]+)$")
    list(APPEND _symbols ${CMAKE_MATCH_1})
  endif()
endforeach()
list(REMOVE_DUPLICATES _symbols)
list(LENGTH _symbols _count)
if(_count LESS 100)
  message(FATAL_ERROR "${_cuda_h}: found only ${_count} driver entry points; "
                      "is this the CUDA driver API header?")
endif()

# Stubs: cuda.h's symbols the simulator does not implement. `base` is the
# name cuGetProcAddress is asked for (no _ptds/_ptsz, no _vN); `rank` the
# N of _vN (1 without), so a lookup can prefer the newest variant.
set(_stubs "")
set(_stub_count 0)
set(_exports "")
foreach(_sym IN LISTS _implemented)
  string(APPEND _exports "    ${_sym};\n")
endforeach()
list(SORT _symbols)
foreach(_sym IN LISTS _symbols)
  if(_sym IN_LIST _implemented)
    continue()
  endif()
  set(_base "${_sym}")
  set(_per_thread false)
  if(_base MATCHES "^(.+)_pt(ds|sz)$")
    set(_base "${CMAKE_MATCH_1}")
    set(_per_thread true)
  endif()
  set(_rank 1)
  if(_base MATCHES "^(.+)_v([0-9]+)$")
    set(_base "${CMAKE_MATCH_1}")
    set(_rank ${CMAKE_MATCH_2})
  endif()
  string(APPEND _stubs "CU_STUB(${_sym}, ${_base}, ${_rank}, ${_per_thread})\n")
  string(APPEND _exports "    ${_sym};\n")
  math(EXPR _stub_count "${_stub_count} + 1")
endforeach()
message(STATUS "Simulated driver: cuda.h ${GPUSLICE_CUDA_H_VERSION}, "
               "${_stub_count} entry points stubbed with CUDA_ERROR_NOT_SUPPORTED")

file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/cuda_stubs.inc
  CONTENT "// Generated by src/sim/driver/cuda_exports.cmake from ${_cuda_h} and
// entry_points.def: the entry points of cuda.h the simulator does not implement.
${_stubs}")
file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/cuda_exports.map
  CONTENT "{\n  global:\n${_exports}  local: *;\n};\n")
