# The fuzz build (-DDSERVE_FUZZ=ON, included by the top-level CMakeLists.txt,
# which stops after it): the libFuzzer targets of tests/fuzz in
# ${CMAKE_BINARY_DIR}/bin/fuzz_*, everything compiled with
# -fsanitize=fuzzer-no-link,address,undefined and UBSan non-recoverable.
# Torch-free and without the gRPC server: it builds only dserve_util,
# dserve_tokenizer, dserve_checkpoint, the request messages
# (dserve_proto_messages) and dserve_request_validation. The smoke tests
# (ctest -L fuzz) and the long runs go through deploy/fuzz.sh.
include_guard(GLOBAL)

if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR
    "DSERVE_FUZZ=ON needs clang (libFuzzer), but the C++ compiler is ${CMAKE_CXX_COMPILER_ID} "
    "(${CMAKE_CXX_COMPILER}). Configure a separate build directory with -DCMAKE_CXX_COMPILER=clang++, "
    "e.g. cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DDSERVE_FUZZ=ON "
    "(Debian: apt-get install clang libclang-rt-dev).")
endif()

set(DSERVE_FUZZ_FLAGS -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
    -fno-omit-frame-pointer)
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
check_cxx_source_compiles([[
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
]] DSERVE_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
if(NOT DSERVE_HAVE_LIBFUZZER)
  message(FATAL_ERROR
    "DSERVE_FUZZ=ON: ${CMAKE_CXX_COMPILER} cannot link -fsanitize=fuzzer,address,undefined "
    "(the libFuzzer/sanitizer runtimes are missing; Debian: apt-get install libclang-rt-dev)")
endif()

# Nothing of the server, torch or the GoogleTest suites.
set(DSERVE_WITH_SERVER OFF)
set(DSERVE_WITH_TOKENIZER ON)
set(DSERVE_BUILD_TESTS OFF)

find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(absl REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)

add_compile_options(${DSERVE_FUZZ_FLAGS})
add_link_options(-fsanitize=address,undefined)
include_directories(${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
enable_testing()

add_subdirectory(model)
add_subdirectory(proto)
add_subdirectory(server)
add_subdirectory(tests/fuzz)
