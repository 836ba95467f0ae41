# MLM pretraining tests (< 30 s). include()d from tests/model/train/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/mlm_tests.cmake)
# Links dserve_mlm when model/train/mlm.cmake defined it, else dserve_train
# (which compiles mlm.cc itself).
if(TARGET dserve_mlm)
  set(_dserve_mlm_lib dserve_mlm)
else()
  set(_dserve_mlm_lib dserve_train)
endif()
add_executable(mlm_test ${CMAKE_CURRENT_LIST_DIR}/mlm_test.cc)
target_link_libraries(mlm_test PRIVATE ${_dserve_mlm_lib} GTest::gtest_main)
dserve_torch_pch(mlm_test)
gtest_discover_tests(mlm_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS train)
