# A LibTorch of another release than the one opara was built with, as far as CMake can tell: the
# installed package must refuse it by name (tests/CMakeLists.txt, downstream.other_torch*).
if(NOT TARGET torch)
  add_library(torch INTERFACE IMPORTED)
endif()
set(TORCH_FOUND TRUE)
