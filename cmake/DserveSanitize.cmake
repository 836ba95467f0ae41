# Sanitizer builds: -DDSERVE_SANITIZE=address,undefined or -DDSERVE_SANITIZE=thread
# (the value goes to -fsanitize=; a CMake list "address;undefined" works too).
# Run them with `bash deploy/sanitize.sh address,undefined|thread`
# (docs/reliability.md, "Sanitizer builds").
#
# Only our code is instrumented: LibTorch, gRPC, protobuf, abseil are Debian's
# or PyTorch's prebuilt libraries. The runtime options and the suppression
# files (tests/sanitizers/*.supp, third-party frames only) reach every test
# through its ENVIRONMENT property, so a plain `ctest` in the build folder
# uses them; that includes the `dserve serve` processes the e2e tests start
# (children inherit the environment). Test timeouts are multiplied by
# DSERVE_SANITIZE_TIMEOUT_FACTOR.
include_guard(GLOBAL)

set(DSERVE_SANITIZE "" CACHE STRING
    "Sanitizers passed to -fsanitize= (address,undefined or thread); empty: none")
set(DSERVE_SANITIZE_TIMEOUT_FACTOR "" CACHE STRING
    "Multiplier of the tests' TIMEOUT in a sanitizer build (default 4 for address, 6 for thread)")

set(DSERVE_SANITIZER_TEST_ENV "")
if(NOT DSERVE_SANITIZE)
  return()
endif()

string(REPLACE ";" "," _dserve_san "${DSERVE_SANITIZE}")
string(REPLACE "," ";" _dserve_san_list "${_dserve_san}")
set(_dserve_known address undefined thread leak)
foreach(_s IN LISTS _dserve_san_list)
  if(NOT _s IN_LIST _dserve_known)
    message(FATAL_ERROR "DSERVE_SANITIZE: unknown sanitizer '${_s}' in '${DSERVE_SANITIZE}' "
                        "(supported: address,undefined or thread)")
  endif()
endforeach()
if("thread" IN_LIST _dserve_san_list AND ("address" IN_LIST _dserve_san_list OR "leak" IN_LIST _dserve_san_list))
  message(FATAL_ERROR "DSERVE_SANITIZE: thread cannot be combined with address/leak ('${DSERVE_SANITIZE}')")
endif()

# The sanitizers in use, as a list, for tests/sanitizers/CMakeLists.txt.
set(DSERVE_SANITIZERS ${_dserve_san_list})

set(_dserve_san_flags -fsanitize=${_dserve_san} -fno-omit-frame-pointer)
if("undefined" IN_LIST _dserve_san_list)
  # Any UB report aborts (a test fails) instead of printing and going on.
  list(APPEND _dserve_san_flags -fno-sanitize-recover=undefined)
endif()
add_compile_options(${_dserve_san_flags})
add_link_options(${_dserve_san_flags})
message(STATUS "dserve: sanitizers ${_dserve_san} (${_dserve_san_flags})")

# --- thread: an instrumented absl::Mutex -----------------------------------
# Debian's libabsl_synchronization is not built with TSan, and absl::Mutex
# synchronises with its own atomics and futexes: TSan sees none of it and
# reports every access guarded by an absl::Mutex (ours and gRPC's) as a race.
# abseil supports TSan through annotations in mutex.cc (compiled in only under
# -fsanitize=thread), so the TSan build compiles that one file from the
# installed version's source against the installed headers and links it into
# every binary: the executable's definitions of absl::Mutex/CondVar come first
# in symbol lookup, so every caller (gRPC included) uses the annotated ones.
# deploy/sanitize.sh fetches the source (`apt-get source abseil`).
if("thread" IN_LIST _dserve_san_list)
  set(DSERVE_ABSL_SOURCE_DIR "" CACHE PATH
      "abseil source tree of the installed version (thread sanitizer builds; deploy/sanitize.sh fetches it)")
  set(_mutex_cc "${DSERVE_ABSL_SOURCE_DIR}/absl/synchronization/mutex.cc")
  if(NOT DSERVE_ABSL_SOURCE_DIR OR NOT EXISTS "${_mutex_cc}")
    message(FATAL_ERROR "DSERVE_SANITIZE=thread needs the abseil source of the installed version: "
      "DSERVE_ABSL_SOURCE_DIR='${DSERVE_ABSL_SOURCE_DIR}' has no absl/synchronization/mutex.cc. "
      "Run `bash deploy/sanitize.sh thread` (fetches it with apt-get source) or pass "
      "-DDSERVE_ABSL_SOURCE_DIR=<abseil source>.")
  endif()
  # Same LTS release and patch level as the headers it is compiled against.
  foreach(_which source installed)
    if(_which STREQUAL "source")
      file(STRINGS "${DSERVE_ABSL_SOURCE_DIR}/absl/base/config.h" _lines REGEX "#define ABSL_LTS_RELEASE_(VERSION|PATCH_LEVEL) ")
    else()
      find_file(_absl_config_h absl/base/config.h PATHS ${absl_DIR}/../../../../include /usr/include NO_DEFAULT_PATH)
      file(STRINGS "${_absl_config_h}" _lines REGEX "#define ABSL_LTS_RELEASE_(VERSION|PATCH_LEVEL) ")
    endif()
    string(REGEX REPLACE "[^0-9;]" "" _version_${_which} "${_lines}")
    string(REPLACE ";" "." _version_${_which} "${_version_${_which}}")
  endforeach()
  if(NOT _version_source STREQUAL _version_installed)
    message(FATAL_ERROR "DSERVE_ABSL_SOURCE_DIR: abseil release ${_version_source} "
      "(${DSERVE_ABSL_SOURCE_DIR}) is not the installed ${_version_installed} (${_absl_config_h})")
  endif()
  # With it, tests/sanitizers/tsan_grpc_handoff.cc: the same kind of hand-off
  # inside gRPC core (start a batch on one thread, its completion on another).
  add_library(dserve_tsan_support OBJECT "${_mutex_cc}" "${CMAKE_SOURCE_DIR}/tests/sanitizers/tsan_grpc_handoff.cc")
  target_link_libraries(dserve_tsan_support PRIVATE absl::synchronization)
  # Every target created after this (all of ours) links the object files.
  link_libraries(dserve_tsan_support)
  message(STATUS "dserve: TSan-annotated absl::Mutex from ${_mutex_cc} (abseil ${_version_source})")
endif()

# --- thread + gcc: target_clones ------------------------------------------
# gcc instruments the ifunc resolver it generates for
# __attribute__((target_clones)) with TSan's function entry hook; the dynamic
# loader runs resolvers before the TSan runtime is up, so the binary crashes
# before main. Files that use target_clones are compiled without the entry/exit
# hooks (their memory accesses stay instrumented; their frames are missing from
# report stacks). Found by scanning every target's sources at the end of the
# configure step, so a new or renamed kernel file is covered too.
if("thread" IN_LIST _dserve_san_list AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  function(_dserve_tsan_target_clones dir)
    get_property(_targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    foreach(_t IN LISTS _targets)
      get_target_property(_type ${_t} TYPE)
      if(_type STREQUAL "INTERFACE_LIBRARY" OR _type STREQUAL "UTILITY")
        continue()
      endif()
      get_target_property(_srcs ${_t} SOURCES)
      get_target_property(_src_dir ${_t} SOURCE_DIR)
      foreach(_src IN LISTS _srcs)
        if(NOT _src MATCHES "\\.(cc|cpp|cxx)$")
          continue()
        endif()
        get_filename_component(_abs "${_src}" ABSOLUTE BASE_DIR "${_src_dir}")
        if(EXISTS "${_abs}")
          file(STRINGS "${_abs}" _hits REGEX "target_clones" LIMIT_COUNT 1)
          if(_hits)
            set_property(SOURCE "${_abs}" TARGET_DIRECTORY ${_t} APPEND PROPERTY
                         COMPILE_OPTIONS --param=tsan-instrument-func-entry-exit=0)
            message(STATUS "dserve: TSan without entry/exit hooks for ${_abs} (target_clones)")
          endif()
        endif()
      endforeach()
    endforeach()
    get_property(_subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    foreach(_d IN LISTS _subdirs)
      _dserve_tsan_target_clones("${_d}")
    endforeach()
  endfunction()
  cmake_language(DEFER CALL _dserve_tsan_target_clones "${CMAKE_SOURCE_DIR}")
endif()

# --- test environment -------------------------------------------------------
set(_dserve_supp ${CMAKE_SOURCE_DIR}/tests/sanitizers)
if("thread" IN_LIST _dserve_san_list)
  set(_dserve_factor 6)
  # halt_on_error: a race kills the process, so the e2e tests (whose server
  # stderr goes to a log) fail instead of passing with a report in the log.
  # ignore_noninstrumented_modules: memory accesses that libc interceptors
  # (free, memcpy, sendmsg, ...) make on behalf of uninstrumented libraries
  # (gRPC, LibTorch, protobuf) are not checked; their synchronisation is
  # invisible to TSan, so e.g. gRPC freeing a slice its poller thread sent
  # was reported as a race entirely inside libgrpc. Our code's own accesses
  # are all still checked; lock/unlock interceptors still record order.
  # OMP_NUM_THREADS=1: libgomp (LibTorch's intra-op pool) synchronises with
  # uninstrumented atomics and futexes that TSan cannot see; with one OpenMP
  # thread there is no pool and no false report (docs/reliability.md).
  list(APPEND DSERVE_SANITIZER_TEST_ENV
    "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:history_size=4:ignore_noninstrumented_modules=1:suppressions=${_dserve_supp}/tsan.supp"
    "OMP_NUM_THREADS=1"
    # Tests that count work done in a fixed window run it this much longer
    # (tests/e2e/e2e_support.py, bench/run_all.py): our own encoder kernels
    # are instrumented and run ~18x slower (an 8x256 forward of the tiny test
    # model, 1 thread: 1.21 s vs 0.067 s), so one full batch of the tiny bench
    # (32 x 256 tokens) takes ~5 s, more than the 1.5 s (x3: 4.5 s) load window
    # of `run_all.py --tiny`. TSan's shadow memory grows with the memory touched.
    "DSERVE_TEST_TIME_FACTOR=6"
    "DSERVE_TEST_RSS_SLACK_MB=64")
else()
  set(_dserve_factor 4)
  if("address" IN_LIST _dserve_san_list)
    list(APPEND DSERVE_SANITIZER_TEST_ENV
      # quarantine_size_mb: freed blocks ASan holds back to catch use after
      # free (default 256 MB per process; 64 keeps many e2e servers within
      # this machine's memory). DSERVE_TEST_RSS_SLACK_MB: what the memory
      # checks of the e2e tests allow on top (the quarantine plus the
      # allocator's caches: the flood test's server grew 107 MB with 64).
      "ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:strict_string_checks=1:quarantine_size_mb=64:suppressions=${_dserve_supp}/asan.supp"
      "LSAN_OPTIONS=suppressions=${_dserve_supp}/lsan.supp:print_suppressions=0"
      "DSERVE_TEST_RSS_SLACK_MB=128")
  endif()
  if("undefined" IN_LIST _dserve_san_list)
    list(APPEND DSERVE_SANITIZER_TEST_ENV
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=${_dserve_supp}/ubsan.supp")
  endif()
endif()
if(DSERVE_SANITIZE_TIMEOUT_FACTOR)
  set(_dserve_factor ${DSERVE_SANITIZE_TIMEOUT_FACTOR})
endif()
set(DSERVE_SANITIZE_TIMEOUT_FACTOR_USED ${_dserve_factor})

# Adds the sanitizer environment to every test of the current directory and
# scales its TIMEOUT (1500 s, ctest's default, when it had none). Deferred to
# the end of each directory that adds tests, so it sees the properties that
# the directory's own set_tests_properties calls set.
function(_dserve_sanitize_directory_tests)
  get_property(_tests DIRECTORY PROPERTY TESTS)
  foreach(_t IN LISTS _tests)
    get_test_property(${_t} ENVIRONMENT _env)
    if(NOT _env)
      set(_env "")
    endif()
    list(APPEND _env ${DSERVE_SANITIZER_TEST_ENV})
    get_test_property(${_t} TIMEOUT _timeout)
    if(NOT _timeout)
      set(_timeout 1500)
    endif()
    math(EXPR _timeout "${_timeout} * ${DSERVE_SANITIZE_TIMEOUT_FACTOR_USED}")
    set_tests_properties(${_t} PROPERTIES ENVIRONMENT "${_env}" TIMEOUT ${_timeout})
  endforeach()
endfunction()

function(add_test)
  _add_test(${ARGV})
  get_property(_deferred DIRECTORY PROPERTY DSERVE_SANITIZE_DEFERRED)
  if(NOT _deferred)
    set_property(DIRECTORY PROPERTY DSERVE_SANITIZE_DEFERRED TRUE)
    cmake_language(DEFER CALL _dserve_sanitize_directory_tests)
  endif()
endfunction()

# gtest_discover_tests: the tests exist only at ctest time (listed by the
# test binary), so the environment and the scaled timeout are set by a small
# script that ctest includes after the module's generated one (TEST_INCLUDE_FILES
# are included in order), over the discovered test list. Must come after the
# top-level include(GoogleTest): a second include would define the original
# again over this wrapper.
if(COMMAND gtest_discover_tests)
  function(gtest_discover_tests target)
    _gtest_discover_tests(${ARGV})
    cmake_parse_arguments(_g "NO_PRETTY_TYPES;NO_PRETTY_VALUES"
      "TEST_PREFIX;TEST_SUFFIX;WORKING_DIRECTORY;TEST_LIST;DISCOVERY_TIMEOUT;XML_OUTPUT_DIR;DISCOVERY_MODE"
      "EXTRA_ARGS;PROPERTIES;TEST_FILTER" ${ARGN})
    set(_list_var ${target}_TESTS)
    if(_g_TEST_LIST)
      set(_list_var ${_g_TEST_LIST})
    endif()
    set(_timeout 1500)
    # By key: a quoted list value (LABELS "a;b") is already split here.
    list(FIND _g_PROPERTIES TIMEOUT _at)
    if(_at GREATER -1)
      math(EXPR _at "${_at} + 1")
      list(GET _g_PROPERTIES ${_at} _timeout)
    endif()
    list(FIND _g_PROPERTIES ENVIRONMENT _at)
    if(_at GREATER -1)
      message(FATAL_ERROR "DSERVE_SANITIZE: gtest_discover_tests(${target}) sets ENVIRONMENT; "
                          "extend cmake/DserveSanitize.cmake to merge it")
    endif()
    math(EXPR _timeout "${_timeout} * ${DSERVE_SANITIZE_TIMEOUT_FACTOR_USED}")
    set(_script "${CMAKE_CURRENT_BINARY_DIR}/${target}_sanitize.cmake")
    file(WRITE "${_script}"
      "# Generated by cmake/DserveSanitize.cmake\n"
      "if(DEFINED ${_list_var})\n"
      "  set_tests_properties(\${${_list_var}} PROPERTIES\n"
      "    ENVIRONMENT [==[${DSERVE_SANITIZER_TEST_ENV}]==] TIMEOUT ${_timeout})\n"
      "endif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${_script}")
  endfunction()
endif()
