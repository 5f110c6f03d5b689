// core/deferred_tensor.h: a placeholder holds no bytes; one a reader made
// reads its elements from its DeferredSource, at the view's offset.
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/deferred_tensor.h>

namespace {

// Element i of the value is i; records each read's first element.
class CountingSource : public lt::DeferredSource {
 public:
  explicit CountingSource(std::vector<int64_t>* begins) : begins_(begins) {}
  void read(int64_t begin, const torch::Tensor& out) const override {
    begins_->push_back(begin);
    out.copy_(torch::arange(begin, begin + out.numel(), out.options()));
  }

 private:
  std::vector<int64_t>* begins_;
};

// A placeholder of `numel` floats whose elements `source` reads, as a reader makes one.
torch::Tensor placeholder_of(std::unique_ptr<lt::DeferredSource> source, int64_t numel) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(numel) * sizeof(float),
                       lt::deferred_data(std::move(source), at::Device(at::kCPU)), nullptr, /*resizable=*/false);
  return torch::empty({0}, torch::kFloat32).set_(storage, 0, {numel});
}

TEST(DeferredTensor, APlaceholderHasItsShapeAndNoBytes) {
  const torch::Tensor p = lt::deferred_tensor({3, 4}, torch::kFloat64);
  EXPECT_TRUE(lt::is_deferred(p));
  EXPECT_EQ(p.sizes(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(p.dtype(), torch::kFloat64);
  EXPECT_EQ(p.storage().nbytes(), 96u);
  EXPECT_FALSE(lt::is_deferred(lt::deferred_tensor({0, 4}, torch::kFloat32)));  // nothing to defer
  EXPECT_FALSE(lt::is_deferred(torch::ones({2})));
  EXPECT_FALSE(lt::is_deferred(torch::Tensor()));
}

TEST(DeferredTensor, CopyElementsReadsFromTheSourceAtTheViewsOffset) {
  std::vector<int64_t> begins;
  const torch::Tensor whole = placeholder_of(std::make_unique<CountingSource>(&begins), 10);
  ASSERT_TRUE(lt::is_deferred(whole));
  const torch::Tensor view = whole.narrow(0, 4, 5);  // elements 4..8 of the storage
  torch::Tensor dst = torch::zeros({3});
  lt::copy_elements(view, 1, dst);  // the view's elements 1..3: the storage's 5..7
  EXPECT_TRUE(dst.equal(torch::tensor({5.0f, 6.0f, 7.0f}))) << dst;
  EXPECT_EQ(begins, std::vector<int64_t>{5});
  // Into another dtype: read in the value's, then converted.
  torch::Tensor doubles = torch::zeros({2}, torch::kFloat64);
  lt::copy_elements(whole, 8, doubles);
  EXPECT_TRUE(doubles.equal(torch::tensor({8.0, 9.0}, torch::kFloat64))) << doubles;
  EXPECT_TRUE(lt::materialized(whole).equal(torch::arange(10, torch::kFloat32)));
}

TEST(DeferredTensor, CopyElementsOfAPlainTensorCopiesThem) {
  const torch::Tensor value = torch::arange(6, torch::kFloat32).view({2, 3});
  torch::Tensor dst = torch::zeros({2});
  lt::copy_elements(value, 3, dst);
  EXPECT_TRUE(dst.equal(torch::tensor({3.0f, 4.0f})));
  EXPECT_TRUE(lt::materialized(value).is_same(value));
}

TEST(DeferredTensor, APlaceholderWithoutASourceCannotBeRead) {
  const torch::Tensor p = lt::deferred_tensor({4}, torch::kFloat32);
  torch::Tensor dst = torch::zeros({4});
  EXPECT_THROW(lt::copy_elements(p, 0, dst), lt::Error);
}

}  // namespace
