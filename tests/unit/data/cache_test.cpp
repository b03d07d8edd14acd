// The stacked training cache: compact dtypes, arena layout, normalisation equal to the evaluation
// path, placements, the fit check, and the raw-chunk HDF5 reader it loads through.
#include <gtest/gtest.h>
#include <hdf5.h>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/data/cache.h"
#include "u3d/data/sampler.h"

namespace u3d {
namespace {

using test::dose_data;

// A dose phantom p.h5 of 4 cases of 16^3 in a temporary folder, its reader and dose_data()'s
// preprocessor.
fs::path dose_phantom(const test::TempDir& dir) {
  test::make_phantom(dir / "p.h5", Task::kDose, 4, 16);
  return dir / "p.h5";
}
struct DosePhantom {
  test::TempDir dir;
  DatasetReader reader{dose_phantom(dir)};
  Preprocessor pre{dose_data(), reader.info()};
};

SamplerOptions whole_volume(int64_t size) {
  SamplerOptions o;
  o.patch = {size, size, size};
  o.batch_size = 1;
  o.augment.flip_prob = 0;
  return o;
}

TEST(StackedCache, PicksExactCompactDtypesAndNormalisesLikeTheEvaluationPath) {
  test::TempDir dir;
  test::make_phantom(dir / "p.h5", Task::kDose, 4, 16);
  const DatasetReader reader(dir / "p.h5");
  const auto& ids = reader.split("train");
  for (const auto& norm : {std::vector<std::string>{"clip:-1000:1000", "none", "none", "none", "none"},
                           std::vector<std::string>{"zscore"}}) {
    DataConfig data = dose_data();
    data.normalize = norm;
    const Preprocessor pre(data, reader.info());
    const StackedCache cache = StackedCache::load(reader, ids, pre, CacheOptions{});
    const TensorCache eval = TensorCache::load(reader, ids, pre, 1);
    ASSERT_EQ(cache.size(), eval.size());
    // The four structure masks are 0/1: kept as uint8, exactly.
    bool masks_uint8 = false;
    for (const auto& f : cache.image_fields()) {
      if (f.dtype == torch::kUInt8) masks_uint8 = f.channels == std::vector<int64_t>{1, 2, 3, 4};
    }
    EXPECT_TRUE(masks_uint8) << cache.describe();
    ASSERT_TRUE(cache.mask());
    EXPECT_EQ(cache.mask()->dtype, torch::kUInt8);
    EXPECT_EQ(cache.target()->dtype, torch::kFloat);
    EXPECT_NEAR(cache.target_mean(), eval.target_mean(), 1e-4 * std::abs(eval.target_mean()));
    // A whole-volume patch without augmentation is the evaluation tensor, bit for bit.
    const PatchSampler sampler(cache, whole_volume(16));
    for (int64_t step = 0; step < cache.size(); ++step) {
      const Batch b = sampler.batch(0, step);
      const CachedCase& c = eval[b.cases[0]];
      EXPECT_TRUE(torch::equal(b.image[0], c.image)) << norm[0];
      EXPECT_TRUE(torch::equal(b.target[0], c.target));
      EXPECT_TRUE(torch::equal(b.mask[0], c.mask.to(torch::kFloat)));
    }
  }
}

// Cases smaller than the patch (pad_to) are padded up to it, centred, as nnU-Net pads them: the case
// itself in the middle, bit for bit; around it 0 (normalised images, targets, masks). The validation
// stack pads its copies and leaves the cases themselves (what validation predicts) as they are.
TEST(StackedCache, CasesSmallerThanThePatchArePaddedCentred) {
  test::TempDir dir;
  test::make_phantom(dir / "p.h5", Task::kDose, 3, 16);
  const DatasetReader reader(dir / "p.h5");
  const auto& ids = reader.split("train");
  const Preprocessor pre(dose_data(), reader.info());
  CacheOptions o;
  o.pad_to = {20, 24, 16};  // 2 before and 2 after on D, 4 and 4 on H, none on W
  const StackedCache cache = StackedCache::load(reader, ids, pre, o);
  TensorCache eval = TensorCache::load(reader, ids, pre, 1);
  SamplerOptions so = whole_volume(16);
  so.patch = o.pad_to;
  const PatchSampler sampler(cache, so);
  for (int64_t step = 0; step < cache.size(); ++step) {
    EXPECT_EQ(cache.shape(step), o.pad_to);
    const Batch b = sampler.batch(0, step);
    const CachedCase& c = eval[b.cases[0]];
    using torch::indexing::Slice;
    const auto inside = [](const torch::Tensor& t) { return t.index({Slice(), Slice(2, 18), Slice(4, 20), Slice()}); };
    EXPECT_TRUE(torch::equal(inside(b.image[0]), c.image));
    EXPECT_TRUE(torch::equal(inside(b.target[0]), c.target));
    EXPECT_TRUE(torch::equal(inside(b.mask[0]), c.mask.to(torch::kFloat)));
    for (const torch::Tensor& t : {b.image[0], b.target[0], b.mask[0]}) {
      const double all = t.abs().sum().item<double>(), middle = inside(t).abs().sum().item<double>();
      EXPECT_NEAR(all, middle, 1e-3 * std::max(1.0, all)) << "non-zero padding";
    }
  }
  const StackedCache stack = eval.stack_shared({}, CachePlacement::kMemory, o.pad_to);
  for (int64_t i = 0; i < eval.size(); ++i) {
    EXPECT_EQ(stack.shape(i), o.pad_to);
    EXPECT_EQ(eval[i].image.sizes(), (std::vector<int64_t>{5, 16, 16, 16}));  // the case as it is
  }
}

TEST(StackedCache, IntegerImagesBecomeInt16AndFloat16IsOptIn) {
  std::vector<CachedCase> cases;
  for (int64_t i = 0; i < 2; ++i) {
    CachedCase c;
    c.id = "c" + std::to_string(i);
    const auto hu = torch::randint(-1024, 3000, {1, 6, 5, 4}).to(torch::kFloat);  // CT-like integers
    const auto soft = torch::rand({1, 6, 5, 4});                                  // not integer
    c.image = torch::cat({hu, soft, (hu > 0).to(torch::kFloat)});
    c.target = torch::rand({1, 6, 5, 4});
    cases.push_back(c);
  }
  const StackedCache exact = StackedCache::from_cases(cases);
  ASSERT_EQ(exact.image_fields().size(), 3u);
  EXPECT_EQ(exact.image_fields()[0].dtype, torch::kUInt8);
  EXPECT_EQ(exact.image_fields()[0].channels, std::vector<int64_t>{2});
  EXPECT_EQ(exact.image_fields()[1].dtype, torch::kInt16);
  EXPECT_EQ(exact.image_fields()[1].channels, std::vector<int64_t>{0});
  EXPECT_EQ(exact.image_fields()[2].dtype, torch::kFloat);
  for (int64_t c = 0; c < 3; ++c) EXPECT_TRUE(torch::equal(exact.channel(1, c).to(torch::kFloat), cases[1].image[c]));
  CacheOptions half;
  half.float16 = true;
  const StackedCache small = StackedCache::from_cases(cases, half);
  EXPECT_EQ(small.image_fields()[2].dtype, torch::kHalf);
  EXPECT_EQ(small.target()->dtype, torch::kHalf);
  EXPECT_LT(small.bytes(), exact.bytes());
}

TEST(StackedCache, UniformCasesAreStackedAndMixedSizesLiveInOneArena) {
  std::vector<CachedCase> same, mixed;
  for (int64_t i = 0; i < 3; ++i) {
    CachedCase c;
    c.id = "s" + std::to_string(i);
    c.image = torch::full({2, 4, 5, 6}, static_cast<float>(i));
    c.target = torch::full({1, 4, 5, 6}, static_cast<float>(i));
    same.push_back(c);
    CachedCase m = c;
    m.id = "m" + std::to_string(i);
    m.image = torch::arange(2 * (4 + i) * 5 * 6).reshape({2, 4 + i, 5, 6}).to(torch::kFloat) + 0.5;
    m.target = torch::zeros({1, 4 + i, 5, 6});
    mixed.push_back(m);
  }
  const StackedCache stacked = StackedCache::from_cases(same);
  ASSERT_TRUE(stacked.uniform_shape());
  const torch::Tensor all = stacked.stacked(stacked.image_fields()[0]);
  EXPECT_EQ(all.sizes(), (torch::IntArrayRef{3, 2, 4, 5, 6}));
  EXPECT_EQ(all.data_ptr(), stacked.image_fields()[0].arena.data_ptr());  // a view, not a copy
  EXPECT_EQ(all[2].min().item<int>(), 2);

  const StackedCache arena = StackedCache::from_cases(mixed);
  EXPECT_FALSE(arena.uniform_shape());
  EXPECT_FALSE(arena.stacked(arena.image_fields()[0]).defined());
  EXPECT_EQ(arena.voxel_offset(2), 4 * 5 * 6 + 5 * 5 * 6);
  EXPECT_EQ(arena.image_fields()[0].arena.numel(), 2 * (4 + 5 + 6) * 5 * 6);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(torch::equal(arena.view(arena.image_fields()[0], i), mixed[static_cast<size_t>(i)].image));
  }
  EXPECT_EQ(arena.min_shape(), (Shape3{4, 5, 6}));
  // Sampling works across sizes: patches keep image and case aligned.
  SamplerOptions o;
  o.patch = {4, 4, 4};
  o.batch_size = 3;
  const PatchSampler sampler(arena, o);
  const Batch b = sampler.batch(0, 0);
  EXPECT_EQ(b.image.sizes(), (torch::IntArrayRef{3, 2, 4, 4, 4}));
}

TEST(TensorCache, StackSharedHoldsTheSplitOnceAndSamplesLikeACopy) {
  torch::manual_seed(7);
  std::vector<CachedCase> cases;
  for (int64_t i = 0; i < 3; ++i) {
    CachedCase c;
    c.id = "v" + std::to_string(i);
    c.image = torch::rand({2, 6 + i, 5, 6});
    c.image[1] = (c.image[1] > 0.5).to(torch::kFloat);  // a 0/1 channel: a copy would store it as uint8
    c.target = torch::randint(0, 3, {6 + i, 5, 6}).to(torch::kUInt8);
    c.mask = torch::ones({1, 6 + i, 5, 6}, torch::kUInt8);
    cases.push_back(c);
  }
  const StackedCache copy = StackedCache::from_cases(cases);
  EXPECT_EQ(copy.image_fields().size(), 2u);  // compact: float32 and uint8 fields

  std::vector<CachedCase> clones;
  for (const auto& c : cases)
    clones.push_back({c.id, c.image.clone(), c.target.clone(), c.mask.clone(), {}, c.spacing});
  TensorCache val(std::move(clones));
  const StackedCache stacked = val.stack_shared();
  ASSERT_EQ(stacked.image_fields().size(), 1u);  // one float32 field, so each image is one view
  ASSERT_TRUE(stacked.target() && stacked.mask());
  for (int64_t i = 0; i < 3; ++i) {
    const CachedCase& c = val[i];
    const auto& original = cases[static_cast<size_t>(i)];
    EXPECT_TRUE(torch::equal(c.image, original.image));
    EXPECT_TRUE(torch::equal(c.target, original.target));
    EXPECT_TRUE(torch::equal(c.mask, original.mask));
    // Views into the stacked arenas, not copies: the split is held once.
    EXPECT_EQ(c.image.data_ptr(), stacked.view(stacked.image_fields()[0], i).data_ptr());
    EXPECT_EQ(c.target.data_ptr(), stacked.view(*stacked.target(), i).data_ptr());
    EXPECT_EQ(c.mask.data_ptr(), stacked.view(*stacked.mask(), i).data_ptr());
  }
  EXPECT_EQ(val.bytes(), stacked.bytes());

  // Validation patches drawn from the shared cache equal those of a separate copy.
  SamplerOptions o;
  o.patch = {4, 4, 4};
  o.batch_size = 3;
  o.apply_augmentation = false;
  const PatchSampler from_copy(copy, o), from_shared(stacked, o);
  for (int64_t step = 0; step < 3; ++step) {
    const Batch a = from_copy.batch(0, step), b = from_shared.batch(0, step);
    EXPECT_TRUE(torch::equal(a.image, b.image)) << "step " << step;
    EXPECT_TRUE(torch::equal(a.target, b.target)) << "step " << step;
    EXPECT_TRUE(torch::equal(a.mask, b.mask)) << "step " << step;
  }
}

TEST(StackedCache, PlacementsWithoutCuda) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "checks the CPU-only fallbacks";
  EXPECT_EQ(resolve_placement(CachePlacement::kAuto, 0.5, torch::kCPU, 1 << 20), CachePlacement::kMemory);
  EXPECT_EQ(resolve_placement(CachePlacement::kMemory, 0.5, torch::kCPU, 1 << 20), CachePlacement::kMemory);
  EXPECT_THROW(resolve_placement(CachePlacement::kGpu, 0.5, torch::kCPU, 1 << 20), ConfigError);
  const DosePhantom phantom;
  const auto& [dir, reader, pre] = phantom;
  CacheOptions pinned;
  pinned.placement = CachePlacement::kPinned;
  const StackedCache cache = StackedCache::load(reader, reader.split("train"), pre, pinned);
  EXPECT_EQ(cache.placement(), CachePlacement::kMemory);  // pinned needs CUDA: falls back
  EXPECT_FALSE(cache.image_fields()[0].arena.is_pinned());
}

TEST(StackedCache, TooLargeForTheMemoryIsAClearError) {
  const DosePhantom phantom;
  const auto& [dir, reader, pre] = phantom;
  CacheOptions o;
  o.limit_bytes = 999;
  try {
    (void)StackedCache::load(reader, reader.split("train"), pre, o);
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("needs about"), std::string::npos) << m;
    EXPECT_NE(m.find("only 999 B is available"), std::string::npos) << m;
  }
}

// An allocation that fails while the cases load (LibTorch's allocator: "[enforce fail at
// alloc_cpu.cpp] ... DefaultCPUAllocator") is a DataError naming the load and the settings, never
// the allocator's text (it used to reach the user as "LibTorch: [enforce fail ...]").
TEST(TensorCache, AnAllocationFailureWhileLoadingIsOneLineOfOurs) {
  const DosePhantom phantom;
  const auto& [dir, reader, pre] = phantom;
  const CaseSource exhausted = [](const std::string&) -> CaseData {
    (void)torch::empty({int64_t{1} << 50}, torch::kUInt8);  // 1 PB: the allocator refuses
    return {};
  };
  const std::string msg =
      test::error_of<DataError>([&] { (void)TensorCache::load(reader, reader.split("train"), pre, 2, exhausted); });
  EXPECT_NE(msg.find("data: out of host memory while loading 3 cases (an allocation of 1125.9 TB failed"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("enforce fail"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("DefaultCPUAllocator"), std::string::npos) << msg;
}

TEST(StackedCache, LoadingIsIndependentOfThreadCount) {
  test::TempDir dir;
  test::make_phantom(dir / "p.h5", Task::kSegmentation, 6, 12);
  const DatasetReader reader(dir / "p.h5");
  DataConfig data;
  const Preprocessor pre(data, reader.info());
  CacheOptions one, three;
  three.threads = 3;
  const StackedCache a = StackedCache::load(reader, reader.split("train"), pre, one);
  const StackedCache b = StackedCache::load(reader, reader.split("train"), pre, three);
  ASSERT_EQ(a.image_fields().size(), b.image_fields().size());
  for (size_t f = 0; f < a.image_fields().size(); ++f) {
    EXPECT_TRUE(torch::equal(a.image_fields()[f].arena, b.image_fields()[f].arena));
  }
  EXPECT_TRUE(a.segmentation());
  EXPECT_EQ(a.target()->dtype, torch::kUInt8);
  EXPECT_TRUE(torch::equal(a.target()->arena, b.target()->arena));
  EXPECT_TRUE(torch::equal(a.norm_sub(), b.norm_sub()));
  EXPECT_TRUE(torch::equal(a.norm_div(), b.norm_div()));
}

// The raw-chunk reader (inflate and unshuffle outside the HDF5 lock) must return exactly what was
// written, also for edge chunks, uncompressed chunks and integer storage.
TEST(RawChunkReader, ReadsBackWhatWasWrittenForEveryLayout) {
  test::TempDir dir;
  DatasetInfo info;
  info.task = Task::kDose;
  info.channel_names = {"a", "b", "c"};
  torch::manual_seed(1);
  const auto image = torch::randn({3, 13, 10, 17});
  const auto ct = torch::randint(-1024, 3000, {3, 13, 10, 17}).to(torch::kInt16);
  const auto target = torch::rand({13, 10, 17}) * 70;
  const auto mask = (torch::rand({13, 10, 17}) > 0.5).to(torch::kUInt8);
  for (const auto& [level, chunk] : std::vector<std::pair<int, int64_t>>{{4, 8}, {0, 8}, {9, 64}, {1, 5}}) {
    const auto path = dir / fmt::format("d{}_{}.h5", level, chunk);
    {
      DatasetWriter w(path, info, DatasetWriteOptions{level, chunk});
      w.write_case(CaseData{"f", image, target, mask, {1, 1, 1}});
      w.write_case(CaseData{"i", ct, target, mask, {1, 1, 1}});
      w.set_split("train", {"f", "i"});
      w.commit();
    }
    const DatasetReader r(path);
    const CaseData f = r.read_case("f");
    EXPECT_TRUE(torch::equal(f.image, image)) << path;
    EXPECT_TRUE(torch::equal(f.target, target)) << path;
    EXPECT_TRUE(torch::equal(f.mask, mask)) << path;
    EXPECT_TRUE(torch::equal(r.read_case("i").image, ct.to(torch::kFloat))) << path;
  }
}

// Chunks never written (as sparse writers leave them) read as the fill value.
TEST(RawChunkReader, UnwrittenChunksReadAsTheFillValue) {
  test::TempDir dir;
  const auto path = dir / "sparse.h5";
  DatasetInfo info;
  info.task = Task::kDose;
  info.channel_names = {"a", "b"};
  const auto image = torch::zeros({2, 12, 12, 12});
  {
    DatasetWriter w(path, info);
    w.write_case(CaseData{"s", image, torch::Tensor(), torch::Tensor(), {1, 1, 1}});
    w.set_split("train", {"s"});
    w.commit();
  }
  // Replace the image by a chunked, compressed dataset of which only one 4^3 block is written.
  const torch::Tensor block = torch::arange(64, torch::kInt16).view({1, 4, 4, 4});
  for (const int16_t fill : {int16_t{0}, int16_t{7}}) {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    H5Ldelete(file, "cases/s/image", H5P_DEFAULT);
    const hsize_t dims[4] = {2, 12, 12, 12}, chunk[4] = {1, 4, 4, 4};
    const hid_t space = H5Screate_simple(4, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 4, chunk);
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, 3);
    H5Pset_fill_value(dcpl, H5T_NATIVE_INT16, &fill);
    const hid_t d = H5Dcreate2(file, "cases/s/image", H5T_STD_I16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    const hsize_t start[4] = {1, 4, 8, 0}, count[4] = {1, 4, 4, 4};
    const hid_t mem = H5Screate_simple(4, count, nullptr);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_INT16, mem, space, H5P_DEFAULT, block.data_ptr()), 0);
    H5Sclose(mem);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(file);

    const DatasetReader r(path);
    const torch::Tensor read = r.read_case("s").image;
    torch::Tensor expected = torch::full({2, 12, 12, 12}, static_cast<float>(fill));
    expected.slice(0, 1, 2).slice(1, 4, 8).slice(2, 8, 12).slice(3, 0, 4).copy_(block);
    EXPECT_TRUE(torch::equal(read, expected)) << "fill " << fill;
  }
}

}  // namespace
}  // namespace u3d
