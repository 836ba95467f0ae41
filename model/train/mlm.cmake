# Masked-LM pretraining pieces (masking, MLM/SOP heads, Enhanced Mask
# Decoder, example packing) as their own library, dserve_mlm (needs only
# dserve_model). include()d from model/train/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/mlm.cmake)
#   target_link_libraries(dserve_train PUBLIC dserve_mlm)   # instead of compiling mlm.cc there
if(NOT TARGET dserve_mlm)
  add_library(dserve_mlm STATIC ${CMAKE_CURRENT_LIST_DIR}/mlm.cc)
  target_link_libraries(dserve_mlm PUBLIC dserve_model)
endif()
