#include "import/archive.h"

#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <cstring>

#include "exec/first_line.h"
#include "import/import_errors.h"

namespace opara {
namespace {

// LibTorch's reader over bytes in memory, which it shares (no copy).
class BytesReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReadAdapter(std::shared_ptr<const std::string> bytes) : bytes_(std::move(bytes)) {}
  [[nodiscard]] size_t size() const override { return bytes_->size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_->size()) return 0;
    const size_t count = std::min<size_t>(n, bytes_->size() - pos);
    std::memcpy(buf, bytes_->data() + pos, count);
    return count;
  }

 private:
  std::shared_ptr<const std::string> bytes_;
};

}  // namespace

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

std::unique_ptr<caffe2::serialize::PyTorchStreamReader> open_archive_bytes(std::shared_ptr<const std::string> bytes,
                                                                           const std::string& name) {
  if (bytes->empty()) {
    fail_import(name, "the archive is empty (0 bytes); write it again with torch.export.save or torch.jit.save");
  }
  try {
    return std::make_unique<caffe2::serialize::PyTorchStreamReader>(
        std::make_shared<BytesReadAdapter>(std::move(bytes)));
  } catch (const std::exception& error) {
    fail_import(name,
                "not a PyTorch model archive ({}). The bytes are damaged or truncated, or not a model: write "
                "them with torch.export.save or torch.jit.save",
                first_line(error));
  }
}

}  // namespace opara
