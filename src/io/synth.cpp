#include "u3d/io/synth.h"

#include <cmath>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/json.h"
#include "u3d/core/rng.h"
#include "u3d/core/staged_folder.h"
#include "u3d/io/nifti/nifti.h"

namespace u3d {
namespace {

using torch::Tensor;

// Normalised coordinates in [-1, 1] along each axis, each (D, H, W).
struct Grid {
  Tensor z, y, x;
};
Grid make_grid(const Shape3& s) {
  auto axis = [](int64_t n) { return torch::linspace(-1.0, 1.0, n, torch::kFloat); };
  auto g = torch::meshgrid({axis(s[0]), axis(s[1]), axis(s[2])}, "ij");
  return {g[0], g[1], g[2]};
}

struct Ellipsoid {
  double cz, cy, cx, rz, ry, rx;
};
// Normalised radius: < 1 inside the ellipsoid.
Tensor radius(const Grid& g, const Ellipsoid& e) {
  return torch::sqrt(((g.z - e.cz) / e.rz).square() + ((g.y - e.cy) / e.ry).square() + ((g.x - e.cx) / e.rx).square());
}

torch::Generator noise_generator(Rng& rng) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(rng.next_u64());
  return gen;
}

CaseData dose_case(const Shape3& size, Rng& rng) {
  const Grid g = make_grid(size);
  const Ellipsoid body{rng.uniform(-0.05, 0.05), rng.uniform(-0.05, 0.05), rng.uniform(-0.05, 0.05),
                       rng.uniform(0.80, 0.92),  rng.uniform(0.65, 0.82),  rng.uniform(0.72, 0.90)};
  const Tensor in_body = radius(g, body) < 1.0;
  // Spinal cord: a tube along D near the back of the body, inside a vertebra.
  const double cord_y = body.cy + 0.62 * body.ry;
  const double cord_x = body.cx + rng.uniform(-0.04, 0.04);
  const Tensor cord_r = torch::sqrt(((g.y - cord_y) / 0.07).square() + ((g.x - cord_x) / 0.07).square());
  const Tensor cord = (cord_r < 1.0) & in_body;
  const Tensor vertebra = (cord_r < 2.2) & ~cord & in_body;
  const double pz = rng.uniform(0.15, 0.45);
  const Ellipsoid parotid_l{pz, body.cy - 0.05, body.cx + 0.48 * body.rx, 0.2, 0.16, 0.14};
  const Ellipsoid parotid_r{pz + rng.uniform(-0.05, 0.05), body.cy - 0.05, body.cx - 0.48 * body.rx, 0.2, 0.16, 0.14};
  const Tensor par_l = (radius(g, parotid_l) < 1.0) & in_body;
  const Tensor par_r = (radius(g, parotid_r) < 1.0) & in_body;
  const Ellipsoid ptv_e{rng.uniform(-0.35, 0.2), rng.uniform(-0.35, 0.1), rng.uniform(-0.3, 0.3),
                        rng.uniform(0.18, 0.32), rng.uniform(0.15, 0.28), rng.uniform(0.15, 0.3)};
  const Tensor ptv_rho = radius(g, ptv_e);
  const Tensor ptv = (ptv_rho < 1.0) & in_body;

  // CT in HU: air -1000, soft tissue ~20, bone 700, organs slightly different, noise 15 HU.
  auto gen = noise_generator(rng);
  Tensor ct = torch::full(g.z.sizes(), -1000.0f);
  ct = torch::where(in_body, torch::full_like(ct, 20.0f), ct);
  ct = torch::where(vertebra, torch::full_like(ct, 700.0f), ct);
  ct = torch::where(cord, torch::full_like(ct, 35.0f), ct);
  ct = torch::where(par_l | par_r, torch::full_like(ct, -10.0f), ct);
  ct = torch::where(ptv, torch::full_like(ct, 45.0f), ct);
  ct = ct + torch::where(in_body, 15.0f * torch::randn(g.z.sizes(), gen), torch::zeros_like(ct));

  // Dose (Gy): 70 in the PTV, exponential fall-off with (approximate) distance from it, spared in
  // the organs at risk, capped in the cord, zero outside the body.
  const double mean_r = (ptv_e.rz + ptv_e.ry + ptv_e.rx) / 3.0;
  const Tensor dist = torch::clamp_min(ptv_rho - 1.0, 0.0) * mean_r;  // normalised units
  Tensor dose = 70.0f * torch::exp(-dist / 0.22f);
  dose = torch::where(par_l | par_r, dose * 0.6f, dose);
  dose = torch::where(cord, torch::clamp_max(dose, 40.0f), dose);
  dose = torch::where(ptv, torch::full_like(dose, 70.0f), dose);
  dose = torch::where(in_body, dose, torch::zeros_like(dose));

  CaseData c;
  c.image = torch::stack({ct, cord.to(torch::kFloat), par_l.to(torch::kFloat), par_r.to(torch::kFloat),
                          ptv.to(torch::kFloat)});  // (5, D, H, W)
  c.target = dose.contiguous();                     // (D, H, W) Gy
  c.mask = in_body.to(torch::kUInt8);               // (D, H, W) possible-dose mask
  c.spacing = {2.5, 3.0, 3.0};
  return c;
}

CaseData segmentation_case(const Shape3& size, Rng& rng) {
  const Grid g = make_grid(size);
  const Ellipsoid body{rng.uniform(-0.05, 0.05), rng.uniform(-0.05, 0.05), rng.uniform(-0.05, 0.05),
                       rng.uniform(0.82, 0.95),  rng.uniform(0.70, 0.85),  rng.uniform(0.78, 0.92)};
  const Ellipsoid liver{rng.uniform(-0.15, 0.15), rng.uniform(-0.2, 0.1), rng.uniform(-0.4, -0.2),
                        rng.uniform(0.35, 0.5),   rng.uniform(0.3, 0.45), rng.uniform(0.3, 0.4)};
  const Ellipsoid kidney{rng.uniform(-0.2, 0.2), rng.uniform(0.1, 0.35), rng.uniform(0.3, 0.45),
                         rng.uniform(0.2, 0.28), rng.uniform(0.14, 0.2), rng.uniform(0.12, 0.18)};
  const double tr = rng.uniform(0.3, 0.5);
  const Ellipsoid tumour{liver.cz + rng.uniform(-0.4, 0.4) * liver.rz,
                         liver.cy + rng.uniform(-0.4, 0.4) * liver.ry,
                         liver.cx + rng.uniform(-0.4, 0.4) * liver.rx,
                         tr * liver.rz,
                         tr * liver.ry,
                         tr * liver.rx};
  const Tensor in_body = radius(g, body) < 1.0;
  Tensor labels = torch::zeros(g.z.sizes(), torch::kUInt8);
  const Tensor liver_m = (radius(g, liver) < 1.0) & in_body;
  const Tensor kidney_m = (radius(g, kidney) < 1.0) & in_body & ~liver_m;
  const Tensor tumour_m = (radius(g, tumour) < 1.0) & liver_m;
  labels.masked_fill_(liver_m, 1);
  labels.masked_fill_(kidney_m, 2);
  labels.masked_fill_(tumour_m, 3);

  // Intensities: outside -1, body 0, liver 1, kidney 1.8, tumour 0.45; smooth bias and noise.
  auto gen = noise_generator(rng);
  Tensor image = torch::full(g.z.sizes(), -1.0f);
  image = torch::where(in_body, torch::zeros_like(image), image);
  image = torch::where(liver_m, torch::full_like(image, 1.0f), image);
  image = torch::where(kidney_m, torch::full_like(image, 1.8f), image);
  image = torch::where(tumour_m, torch::full_like(image, 0.45f), image);
  const double fz = rng.uniform(0.5, 1.5), fx = rng.uniform(0.5, 1.5);
  image = image + 0.15f * torch::sin(fz * g.z + fx * g.x) + 0.25f * torch::randn(g.z.sizes(), gen);

  CaseData c;
  c.image = image.unsqueeze(0).contiguous();  // (1, D, H, W)
  c.target = labels;                          // (D, H, W) uint8
  c.spacing = {1.5, 1.0, 1.0};
  return c;
}

// ---- surface phantom ------------------------------------------------------------------------

struct Vec3 {
  double z, y, x;
};
double dot(const Vec3& a, const Vec3& b) { return a.z * b.z + a.y * b.y + a.x * b.x; }
Vec3 normalized(const Vec3& v) {
  const double n = std::sqrt(dot(v, v));
  return {v.z / n, v.y / n, v.x / n};
}
Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a.y * b.x - a.x * b.y, a.x * b.z - a.z * b.x, a.z * b.y - a.y * b.z};
}
Vec3 random_direction(Rng& rng) {
  for (;;) {
    const Vec3 v{rng.normal(), rng.normal(), rng.normal()};
    if (dot(v, v) > 1e-6) return normalized(v);
  }
}

// A sheet's frame: in-plane coordinates a, b and the height w along the normal, in voxels from the
// volume's centre, each (D, H, W).
struct Frame {
  Tensor a, b, w;
};
Frame make_frame(const Shape3& s, const Vec3& n) {
  const Vec3 helper = std::abs(n.z) < 0.9 ? Vec3{1, 0, 0} : Vec3{0, 1, 0};
  const Vec3 u = normalized(cross(n, helper)), v = cross(n, u);
  auto axis = [](int64_t len) { return torch::arange(len, torch::kFloat) - 0.5f * static_cast<float>(len - 1); };
  const auto g = torch::meshgrid({axis(s[0]), axis(s[1]), axis(s[2])}, "ij");
  auto project = [&](const Vec3& d) { return d.z * g[0] + d.y * g[1] + d.x * g[2]; };
  return {project(u), project(v), project(n)};
}

// A height field h(a, b) over a sheet's frame and its gradient (dh/da, dh/db), each (D, H, W).
struct Height {
  Tensor h, ha, hb;
};
// offset + sum of two low-frequency sinusoids, one along a and one along b.
Height bent_height(const Frame& f, double offset, double extent, Rng& rng) {
  Height r{torch::full_like(f.a, offset), torch::zeros_like(f.a), torch::zeros_like(f.a)};
  for (int along_b = 0; along_b < 2; ++along_b) {
    const double amplitude = rng.uniform(0.02, 0.06) * extent;
    const double omega = 6.283185307179586 / (rng.uniform(0.8, 1.6) * extent);
    const double phase = rng.uniform(0.0, 6.283185307179586);
    const Tensor arg = omega * (along_b ? f.b : f.a) + phase;
    r.h = r.h + amplitude * torch::sin(arg);
    (along_b ? r.hb : r.ha) = amplitude * omega * torch::cos(arg);
  }
  return r;
}

CaseData surface_case(const Shape3& size, Rng& rng) {
  const double extent = static_cast<double>(std::min({size[0], size[1], size[2]}));
  const int64_t n_sheets = 2 + rng.uniform_int(3);
  auto gen = noise_generator(rng);
  Tensor surface = torch::zeros({size[0], size[1], size[2]}, torch::kBool);
  Tensor image = torch::zeros({size[0], size[1], size[2]}, torch::kFloat);
  Vec3 normal{};
  Frame frame;
  Height previous;
  double previous_thickness = 0;
  for (int64_t k = 0; k < n_sheets; ++k) {
    const double thickness = rng.uniform(1.0, 3.0);  // voxels, across the sheet
    // Stacked: the previous sheet's orientation, lying on it where the bends bring them together.
    const bool stacked = k > 0 && rng.bernoulli(0.5);
    Height height;
    if (stacked) {
      height = bent_height(frame, 0.0, extent, rng);
      const double gap = 0.5 * (previous_thickness + thickness);
      height.h = height.h + previous.h + gap + rng.uniform(0.05, 0.12) * extent;
      const Tensor touching = height.h < previous.h + gap;
      height.h = torch::where(touching, previous.h + gap, height.h);
      height.ha = torch::where(touching, previous.ha, height.ha + previous.ha);
      height.hb = torch::where(touching, previous.hb, height.hb + previous.hb);
    } else {
      normal = random_direction(rng);
      frame = make_frame(size, normal);
      height = bent_height(frame, rng.uniform(-0.25, 0.25) * extent, extent, rng);
    }
    // Distance from the sheet's mid-surface (first order: height difference over the slope).
    const Tensor dist = (frame.w - height.h) / torch::sqrt(1 + height.ha.square() + height.hb.square());
    Tensor present = torch::ones_like(surface);
    if (k == 0 || rng.bernoulli(0.4)) {  // a disc cut out of the sheet
      const double a0 = rng.uniform(-0.25, 0.25) * extent, b0 = rng.uniform(-0.25, 0.25) * extent;
      const double r = rng.uniform(0.1, 0.2) * extent;
      present = (frame.a - a0).square() + (frame.b - b0).square() >= r * r;
    }
    surface |= (dist.abs() < 0.5 * thickness) & present;
    const double sigma = 0.5 * thickness + 0.5;
    const Tensor profile = rng.uniform(0.8, 1.2) * torch::exp(-0.5 * (dist / sigma).square());
    image = torch::maximum(image, torch::where(present, profile, torch::zeros_like(profile)));
    previous = height;
    previous_thickness = thickness;
  }
  Tensor labels = surface.to(torch::kUInt8);
  // Unlabeled slabs: a band of slices along one axis, or a box; label 2 whatever lies there.
  const int64_t n_slabs = 1 + rng.uniform_int(2);
  for (int64_t i = 0; i < n_slabs; ++i) {
    const bool band = rng.bernoulli(0.5);
    const int64_t band_axis = rng.uniform_int(3);
    Tensor region = labels;
    for (int64_t axis = 0; axis < 3; ++axis) {
      if (band && axis != band_axis) continue;
      const double share = band ? rng.uniform(0.08, 0.2) : rng.uniform(0.2, 0.45);
      const int64_t len = std::max<int64_t>(1, std::llround(share * static_cast<double>(size[axis])));
      const int64_t start = rng.uniform_int(size[axis] - len + 1);
      region = region.narrow(axis, start, len);
    }
    region.fill_(2);
  }
  const Grid g = make_grid(size);
  const double fz = rng.uniform(0.5, 1.5), fy = rng.uniform(0.5, 1.5), phase = rng.uniform(0.0, 6.283185307179586);
  image = image + 0.2f * torch::sin(fz * g.z + fy * g.y + phase) + 0.3f * torch::randn(g.z.sizes(), gen);

  CaseData c;
  c.image = image.unsqueeze(0).contiguous();  // (1, D, H, W)
  c.target = labels;                          // (D, H, W) uint8: 0, 1, 2 (ignore)
  c.spacing = {1.0, 1.0, 1.0};
  return c;
}

// ---- KiTS19-like phantom ------------------------------------------------------------------

// Abdominal CT (HU) as the MLPerf 3D U-Net benchmark sees KiTS19 after its preprocessing: resampled
// to 1.6 mm isotropic from a native slice thickness of 0.5-5 mm (the partial volume of a thick
// slice: a box blur along z over thickness / 1.6 voxels; labels by nearest neighbour, unblurred),
// at least `size` per axis (the benchmark pads every volume to the patch) and up to 2x (z) and
// 1.35x (y, x) larger. Air -1000, fat -100, soft tissue 40, spine 500, kidneys 160 (cortex,
// contrast phase) around a 100 HU medulla, one tumour of 50-90 HU grown out of a kidney's surface;
// noise 20 HU. Labels: 0 background, 1 kidney, 2 tumour.
CaseData kits_case(const Shape3& size, Rng& rng) {
  const Shape3 shape = {static_cast<int64_t>(std::llround(size[0] * rng.uniform(1.0, 2.0))),
                        static_cast<int64_t>(std::llround(size[1] * rng.uniform(1.0, 1.35))),
                        static_cast<int64_t>(std::llround(size[2] * rng.uniform(1.0, 1.35)))};
  const Grid g = make_grid(shape);
  const Ellipsoid body{0.0, rng.uniform(-0.05, 0.05), rng.uniform(-0.05, 0.05),
                       4.0, rng.uniform(0.75, 0.9),   rng.uniform(0.85, 0.95)};
  const Ellipsoid inner{0.0, body.cy, body.cx, 4.0, body.ry - 0.08, body.rx - 0.08};  // inside the fat layer
  const Ellipsoid spine{0.0, body.cy + 0.45, 0.0, 4.0, 0.1, 0.1};
  const double kz = rng.uniform(-0.25, 0.25);
  const Ellipsoid kidney_l{kz + rng.uniform(-0.05, 0.05), 0.3, -0.4, rng.uniform(0.25, 0.35), rng.uniform(0.14, 0.18),
                           rng.uniform(0.1, 0.13)};
  const Ellipsoid kidney_r{kz + rng.uniform(-0.05, 0.05), 0.3, 0.4, rng.uniform(0.25, 0.35), rng.uniform(0.14, 0.18),
                           rng.uniform(0.1, 0.13)};
  const Ellipsoid& host = rng.bernoulli(0.5) ? kidney_l : kidney_r;
  const double angle = rng.uniform(0.0, 6.283185307179586), tr = rng.uniform(0.35, 0.8);
  const Ellipsoid tumour{host.cz + rng.uniform(-0.6, 0.6) * host.rz,
                         host.cy + 0.8 * host.ry * std::sin(angle),
                         host.cx + 0.8 * host.rx * std::cos(angle),
                         tr * host.ry * 1.5,
                         tr * host.ry,
                         tr * host.ry};
  const Tensor in_body = radius(g, body) < 1.0, in_inner = radius(g, inner) < 1.0;
  const Tensor rl = radius(g, kidney_l), rr = radius(g, kidney_r);
  const Tensor kidney_m = ((rl < 1.0) | (rr < 1.0)) & in_body;
  const Tensor medulla_m = ((rl < 0.6) | (rr < 0.6)) & in_body;
  const Tensor tumour_m = (radius(g, tumour) < 1.0) & in_body;
  Tensor labels = torch::zeros(g.z.sizes(), torch::kUInt8);
  labels.masked_fill_(kidney_m, 1);
  labels.masked_fill_(tumour_m, 2);

  auto gen = noise_generator(rng);
  Tensor image = torch::full(g.z.sizes(), -1000.0f);
  image.masked_fill_(in_body, -100.0f);
  image.masked_fill_(in_inner, 40.0f);
  image.masked_fill_(radius(g, spine) < 1.0, 500.0f);
  image.masked_fill_(kidney_m, 160.0f);
  image.masked_fill_(medulla_m, 100.0f);
  const double tumour_hu = rng.uniform(50.0, 90.0);
  image = torch::where(tumour_m, tumour_hu + 15.0f * torch::sin(9.0 * g.z + 7.0 * g.x), image);
  const double thickness_mm = rng.uniform(0.5, 5.0);  // native slice thickness, resampled to 1.6 mm
  const int64_t blur = 2 * std::max<int64_t>(0, std::llround(thickness_mm / 1.6 / 2.0)) + 1;
  if (blur > 1) {
    image = torch::avg_pool3d(image.unsqueeze(0).unsqueeze(0), {blur, 1, 1}, {1, 1, 1}, {blur / 2, 0, 0},
                              /*ceil_mode=*/false, /*count_include_pad=*/false)
                .squeeze(0)
                .squeeze(0);
  }
  image = image + 20.0f * torch::randn(g.z.sizes(), gen);

  CaseData c;
  c.image = image.unsqueeze(0).contiguous();  // (1, D, H, W) HU
  c.target = labels;                          // (D, H, W) uint8
  c.spacing = {1.6, 1.6, 1.6};
  return c;
}

}  // namespace

DatasetInfo phantom_info(Task task, PhantomKind kind) {
  if (task == Task::kDose && kind != PhantomKind::kOrgans) {
    throw UsageError("synth: the surface and kits phantoms are segmentation tasks, not dose tasks");
  }
  DatasetInfo info;
  info.task = task;
  if (task == Task::kDose) {
    info.channel_names = {"ct", "spinal_cord", "parotid_l", "parotid_r", "ptv"};
    info.target_name = "dose";
    info.target_units = "Gy";
    info.description = "u3d phantom: dose prediction";
  } else if (kind == PhantomKind::kKits) {
    info.channel_names = {"ct"};
    info.target_name = "labels";
    info.num_classes = 3;
    info.class_names = {"background", "kidney", "tumour"};
    info.description = "u3d phantom: KiTS19-like kidney and tumour segmentation (1.6 mm)";
  } else if (kind == PhantomKind::kSurface) {
    info.channel_names = {"image"};
    info.target_name = "labels";
    info.num_classes = 2;
    info.class_names = {"background", "surface"};
    info.ignore_label = 2;
    info.description = "u3d phantom: thin-surface segmentation";
  } else {
    info.channel_names = {"image"};
    info.target_name = "labels";
    info.num_classes = 4;
    info.class_names = {"background", "liver", "kidney", "tumour"};
    info.description = "u3d phantom: segmentation";
  }
  return info;
}

CaseData make_phantom_case(Task task, const Shape3& size, uint64_t seed, int64_t index, PhantomKind kind) {
  const bool surface = kind == PhantomKind::kSurface, kits = kind == PhantomKind::kKits;
  if (task == Task::kDose && kind != PhantomKind::kOrgans) {
    throw UsageError("synth: the surface and kits phantoms are segmentation tasks, not dose tasks");
  }
  Rng rng(seed, static_cast<uint64_t>(index),
          task == Task::kDose ? 0xD05E : (surface ? 0x5F4CE : (kits ? 0x4B175 : 0x5E6)));
  CaseData c = task == Task::kDose ? dose_case(size, rng)
               : surface           ? surface_case(size, rng)
               : kits              ? kits_case(size, rng)
                                   : segmentation_case(size, rng);
  c.id = fmt::format("case_{:03d}", index);
  return c;
}

void write_phantom_dataset(const PhantomOptions& o, const std::filesystem::path& out) {
  if (o.cases < 2)
    throw UsageError(fmt::format("synth: --cases {} is too few; need at least 2 (train and val)", o.cases));
  for (auto s : o.size) {
    if (s < 8) throw UsageError(fmt::format("synth: --size {} is too small; need at least 8 voxels per axis", s));
  }
  if (o.val_fraction < 0 || o.test_fraction < 0 || o.val_fraction + o.test_fraction >= 1) {
    throw UsageError("synth: --val-fraction and --test-fraction must be >= 0 and sum to less than 1");
  }
  const int64_t n_val = std::max<int64_t>(1, std::llround(o.cases * o.val_fraction));
  const int64_t n_test = std::llround(o.cases * o.test_fraction);
  const int64_t n_train = o.cases - n_val - n_test;
  if (n_train < 1) throw UsageError("synth: no cases left for training; lower --val-fraction or --test-fraction");
  DatasetWriter writer(out, phantom_info(o.task, o.kind));
  std::vector<std::string> train, val, test;
  for (int64_t i = 0; i < o.cases; ++i) {
    CaseData c = make_phantom_case(o.task, o.size, o.seed, i, o.kind);
    (i < n_train ? train : (i < n_train + n_val ? val : test)).push_back(c.id);
    writer.write_case(c);
  }
  writer.set_split("train", train);
  writer.set_split("val", val);
  if (!test.empty()) writer.set_split("test", test);
  writer.commit();
}

void write_phantom_nnunet_raw(const PhantomOptions& o, const std::filesystem::path& dir) {
  if (o.task != Task::kSegmentation) throw UsageError("synth: --format nnunet writes segmentation phantoms only");
  if (o.cases < 2) throw UsageError(fmt::format("synth: --cases {} is too few; need at least 2", o.cases));
  const int64_t n_test = std::llround(o.cases * o.test_fraction);
  if (n_test >= o.cases) throw UsageError("synth: --test-fraction leaves no training cases");
  StagedFolder out(dir);  // a failure (full disk, stop signal) leaves no folder, not empty ones
  for (const char* sub : {"imagesTr", "labelsTr", "imagesTs", "labelsTs"}) {
    if (n_test == 0 && std::string(sub).back() == 's') continue;  // no test cases: no *Ts folders
    ensure_writable_directory(out.path() / sub);
  }
  const DatasetInfo info = phantom_info(Task::kSegmentation, o.kind);
  Json labels = Json::object();
  for (size_t k = 0; k < info.class_names.size(); ++k) labels[info.class_names[k]] = k;
  if (info.ignore_label >= 0) labels["ignore"] = info.ignore_label;
  const char* kind =
      o.kind == PhantomKind::kSurface ? "surface" : (o.kind == PhantomKind::kKits ? "kits" : "segmentation");
  write_file_atomic(
      out.path() / "dataset.json",
      json_file_text({{"channel_names", {{"0", "phantom"}}},
                      {"labels", labels},
                      {"numTraining", o.cases - n_test},
                      {"file_ending", ".nii.gz"},
                      {"description", fmt::format("u3d {} phantoms (trainer synth --format nnunet)", kind)}}));
  for (int64_t i = 0; i < o.cases; ++i) {
    const CaseData c = make_phantom_case(Task::kSegmentation, o.size, o.seed, i, o.kind);
    const bool test = i >= o.cases - n_test;
    const SourceGeometry g = plain_geometry({c.target.size(0), c.target.size(1), c.target.size(2)}, c.spacing);
    write_nifti(out.path() / (test ? "imagesTs" : "imagesTr") / (c.id + "_0000.nii.gz"), c.image[0], g);
    write_nifti(out.path() / (test ? "labelsTs" : "labelsTr") / (c.id + ".nii.gz"), c.target, g);
  }
  out.commit();
}

}  // namespace u3d
