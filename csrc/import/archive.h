#pragma once

#include <caffe2/serialize/inline_container.h>

#include <memory>
#include <string>

namespace opara {

// Opens a model archive (both formats are zip files) with LibTorch's reader; a file that is not
// a readable zip gets an opara::Error naming it.
std::unique_ptr<caffe2::serialize::PyTorchStreamReader> open_archive(const std::string& path);

}  // namespace opara
