#include "archive.h"

#include "import_errors.h"

namespace opara {

std::unique_ptr<caffe2::serialize::PyTorchStreamReader> open_archive(const std::string& path) {
  try {
    return std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const std::exception& error) {
    fail_import(path,
                "not a PyTorch model archive ({}). The file is damaged or truncated, or not a model: export it "
                "with torch.jit.save or torch.export.save",
                first_line(error));
  }
}

}  // namespace opara
