#pragma once

#include <caffe2/serialize/inline_container.h>

#include <memory>
#include <string>

namespace opara {

// Opens a model archive (both formats are zip files) with LibTorch's reader; a file that is not
// a readable zip gets an opara::Error naming it.
std::unique_ptr<caffe2::serialize::PyTorchStreamReader> open_archive(const std::string& path);

// The same for an archive held in memory (what torch.export.save writes to a buffer); `name`
// stands for the file in errors.
std::unique_ptr<caffe2::serialize::PyTorchStreamReader> open_archive_bytes(std::shared_ptr<const std::string> bytes,
                                                                           const std::string& name);

}  // namespace opara
