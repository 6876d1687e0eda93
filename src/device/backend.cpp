// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#include "modhooks/device/backend.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros_like.h>
#include <dlfcn.h>
#include <torch/version.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "modhooks/core/error.h"
#include "modhooks/device/detail/npu_ops.h"

MODHOOKS_BEGIN_NAMESPACE
namespace device {
namespace {

/// CPU, CUDA and any other device with ATen kernels: ATen ops run on the tensor's own device
/// (and stream), so nothing here is CUDA-specific.
class AtenBackend final : public Backend {
 public:
  const char* name() const override { return "aten"; }

  at::Tensor zeros_like(const at::Tensor& t) const override { return at::zeros_like(t); }

  at::Tensor mul(const at::Tensor& t, double factor) const override { return at::mul(t, factor); }

  double norm(c10::ArrayRef<at::Tensor> tensors) const override {
    if (tensors.size() == 1) return at::linalg_vector_norm(tensors[0], 2).item<double>();
    // One host synchronisation for the whole list, as torch.nn.utils.clip_grad_norm_ does.
    std::vector<at::Tensor> norms;
    norms.reserve(tensors.size());
    for (const auto& t : tensors) norms.push_back(at::linalg_vector_norm(t, 2).to(at::kDouble));
    return at::linalg_vector_norm(at::stack(norms), 2).item<double>();
  }

  std::optional<std::size_t> first_non_finite(c10::ArrayRef<at::Tensor> tensors) const override {
    std::vector<at::Tensor> flags;
    flags.reserve(tensors.size());
    for (const auto& t : tensors) flags.push_back(at::isfinite(t).all());
    at::Tensor host = at::stack(flags).to(at::kCPU);
    const bool* finite = host.data_ptr<bool>();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!finite[i]) return i;
    }
    return std::nullopt;
  }
};

/// at_npu::native::get_npu_format(const at::Tensor&), exported by torch_npu as a C++ symbol
/// whose signature spells only libtorch types; null when torch_npu is not in the process.
using NpuFormatFn = int64_t (*)(const at::Tensor&);

NpuFormatFn npu_format_fn() {
  static const auto fn = reinterpret_cast<NpuFormatFn>(
      dlsym(RTLD_DEFAULT, "_ZN6at_npu6native14get_npu_formatERKN2at6TensorE"));
  return fn;
}

/// ACL formats whose storage is exactly the tensor's elements: ND, NCHW, NHWC, NDHWC, NCDHW.
bool is_base_format(int64_t format) {
  return format == 0 || format == 1 || format == 2 || format == 27 || format == 30;
}

/// The NPU backend reads and writes a tensor's bytes directly, so they must be exactly its
/// elements in order: contiguous, and (under torch_npu) in a base format, not a padded private
/// one such as FRACTAL_NZ.
void require_dense(const at::Tensor& t, const char* what) {
  if (!t.is_contiguous()) {
    std::ostringstream msg;
    msg << "modhooks: the NPU backend needs contiguous tensors in a base format, but the " << what
        << " on " << t.device() << " is not contiguous (sizes " << t.sizes() << ", strides "
        << t.strides() << "); make it .contiguous() first";
    modhooks::detail::fail<RuntimeError>("device.npu.not_contiguous", msg.str());
  }
  if (NpuFormatFn fn = npu_format_fn()) {
    int64_t format = fn(t);
    if (!is_base_format(format)) {
      modhooks::detail::fail<RuntimeError>(
          "device.npu.private_format",
          std::string("modhooks: the NPU backend needs contiguous tensors in a base "
                      "format, but the ") +
              what + " on npu has private ACL format " + std::to_string(format) +
              "; convert it with torch_npu.npu_format_cast(t, 2) first");
    }
  }
}

detail::NpuBuffer buffer(const at::Tensor& t) {
  return {t.data_ptr(), t.sizes().vec(), t.scalar_type(),
          static_cast<int32_t>(t.device().has_index() ? t.device().index() : 0)};
}

at::Tensor empty_dense(const at::Tensor& like) {
  at::Tensor out =
      at::empty(like.sizes(), like.options().memory_format(at::MemoryFormat::Contiguous));
  require_dense(out, "new tensor from the device allocator");
  return out;
}

/// Norm and finiteness have no ACL kernel here: the tensor is copied to the host and reduced
/// there. Correct everywhere, but it moves every gradient byte; see docs/device.md.
at::Tensor to_host(const at::Tensor& t) {
  require_dense(t, "gradient");
  at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU));
  detail::npu_copy_to_host(buffer(t), host.data_ptr());
  return host;
}

class NpuBackend final : public Backend {
 public:
  const char* name() const override { return "npu"; }

  at::Tensor zeros_like(const at::Tensor& t) const override {
    at::Tensor out = empty_dense(t);
    detail::npu_fill_zero(buffer(out));
    return out;
  }

  at::Tensor mul(const at::Tensor& t, double factor) const override {
    require_dense(t, "gradient");
    at::Tensor out = empty_dense(t);
    detail::npu_mul(buffer(t), factor, buffer(out));
    return out;
  }

  double norm(c10::ArrayRef<at::Tensor> tensors) const override {
    double sum_of_squares = 0;
    for (const auto& t : tensors) {
      double n = at::linalg_vector_norm(to_host(t), 2).item<double>();
      sum_of_squares += n * n;
    }
    return std::sqrt(sum_of_squares);
  }

  std::optional<std::size_t> first_non_finite(c10::ArrayRef<at::Tensor> tensors) const override {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!at::isfinite(to_host(tensors[i])).all().item<bool>()) return i;
    }
    return std::nullopt;
  }
};

}  // namespace

bool is_npu(const c10::Device& device) {
#if TORCH_VERSION_MAJOR >= 2
  return device.type() == c10::DeviceType::PrivateUse1 && c10::get_privateuse1_backend() == "npu";
#else
  (void)device;
  return false;
#endif
}

const Backend& backend_for(const c10::Device& device) {
  static const AtenBackend aten;
  static const NpuBackend npu;
  if (is_npu(device)) return npu;
  return aten;
}

}  // namespace device
MODHOOKS_END_NAMESPACE
