// Surface-segmentation metrics of the Vesuvius Challenge surface-detection task (thin papyrus
// sheets in 3D CT): Surface Dice at a tolerance, variation of information (VOI) between connected
// components, Betti numbers and a topology score, and their weighted total. Pure functions of CPU
// tensors; distances are in voxel units (no spacing).
//
// Inputs. `score_surface` takes label volumes (D, H, W) uint8: prediction in {0, 1}, reference in
// {0, 1, ignore_label}; anything else is a DataError. The other functions take binary masks
// (D, H, W), bool or uint8, nonzero = foreground. Tensors on another device are copied to the CPU.
//
// Ignore label (as the competition's metric does): where reference == ignore_label, BOTH volumes
// are set to background before any metric is computed, so a prediction there changes nothing.
//
// Definitions, and how far they are checked against the competition's own metric code (the Python
// package `topometrics`, README "Topological Metrics for 3D Instance Segmentation of Surfaces",
// files leaderboard.py, voi.py, toposcore.py; found through code search, repository not named):
//
// - Total = 0.30 TopoScore + 0.35 SurfaceDice + 0.35 VOI score. Matches leaderboard.py.
// - Surface Dice (Nikolov et al. 2018, arXiv:1809.04430): a surface voxel is a foreground voxel
//   with a 6-connected background neighbour (outside the volume counts as background). With S_p,
//   S_r the surface voxels and d the exact Euclidean distance (Felzenszwalb-Huttenlocher EDT),
//   NSD = (|{s in S_p : d(s, S_r) <= tol}| + |{s in S_r : d(s, S_p) <= tol}|) / (|S_p| + |S_r|);
//   both masks empty -> 1, exactly one empty -> 0 (matches leaderboard.py). DIFFERS from the
//   competition in one respect: it calls DeepMind's surface-distance package, whose surface
//   elements are the faces of the 2x2x2 dual grid weighted by their area, not voxels counted
//   once. Values agree for identical and for far-apart masks; in between they are close but
//   not equal (unverified by how much).
// - VOI: connected components with 26-connectivity of both binary masks, then over the voxels in
//   the UNION of the two foregrounds only (voi.py, use_union_mask=True; a voxel foreground in one
//   mask only has label 0 in the other, so background takes part as a label there), the
//   contingency table n_ij of (reference component i, prediction component j):
//     voi_split = H(pred | ref), voi_merge = H(ref | pred), voi = split + merge,
//   entropies in bits (log2, as scikit-image's variation_of_information, which voi.py calls).
//   voi_split is large when the prediction splits a reference sheet, voi_merge when it merges
//   sheets. Score = 1 / (1 + alpha * voi), alpha = 0.3 (README example and competition constants).
//   Both masks empty -> voi = 0, score 1. Matches voi.py (which gets the same numbers; its comment
//   names the two terms the other way round, the values are assigned as here).
// - Betti numbers of a binary mask, for a chosen pair of digital topologies:
//     kFg26: foreground 26-connected, background 6-connected; the foreground is the union of its
//            voxels as closed unit cubes (the "T-construction").
//     kFg6:  foreground 6-connected, background 26-connected; voxels are the vertices of a
//            cubical complex with an edge, square or cube wherever all its corner voxels are
//            foreground (the "V-construction", the one Betti-Matching-3D uses).
//   b0 = foreground components; b2 = background components (complementary connectivity) of the
//   volume padded with one layer of background, minus the outer one (cavities); b1 = b0 + b2 - chi
//   with chi = vertices - edges + squares - cubes of the complex above.
// - TopoScore. The competition runs Betti matching (Stucki et al., Betti-Matching-3D, V-
//   construction on the inverted masks so foreground enters the filtration first) on each of the
//   8 octant tiles (2 cuts per axis, sizes differing by at most 1), sums per dimension k the
//   matched m_k, predicted p_k and reference g_k feature counts over tiles, and scores
//     F1_k = 2 m_k / (p_k + g_k) if g_k > 0;  0.5 / (p_k + 0.5) if g_k == 0 < p_k;  inactive if
//     p_k + g_k == 0; TopoScore = sum over active k of w_k F1_k / sum of active w_k,
//     w = (0.34, 0.33, 0.33); 1 when no dimension is active.
//   The weights, the F1 and the tiling match toposcore.py/leaderboard.py. UNVERIFIED
//   APPROXIMATION: no Betti matching here. p_k, g_k are the Betti numbers (kFg6) of each tile and
//   m_k = min(p_k, g_k) per tile, an upper bound of the matched count (Betti matching only matches
//   features that correspond in space), so TopoScore here is >= the competition's.
#pragma once
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <optional>

namespace u3d {

// Pairing of foreground/background connectivities for Betti numbers (see the top of the file).
enum class DigitalTopology { kFg26, kFg6 };

// Connected components of a binary mask (D, H, W). labels: (D, H, W) int32, 0 = background,
// 1..count in raster order of each component's first voxel. connectivity: 6 or 26 (else
// DataError). Union-find over voxels, no recursion; the one int32 volume is its only big buffer.
struct ComponentLabels {
  torch::Tensor labels;
  int64_t count = 0;
};
ComponentLabels label_components(const torch::Tensor& mask, int connectivity);

// Normalized Surface Dice in [0, 1] of two binary masks at `tolerance_voxels` (>= 0); surfaces and
// distances are segmentation_eval.h's surface_voxels and distance_transform (unit spacing).
double surface_dice(const torch::Tensor& pred, const torch::Tensor& ref, double tolerance_voxels);

// VOI terms in bits between the 26-connected components of two binary masks.
struct VoiTerms {
  double split = 0.0;  // H(pred | ref)
  double merge = 0.0;  // H(ref | pred)
  double total() const { return split + merge; }
};
VoiTerms variation_of_information(const torch::Tensor& pred, const torch::Tensor& ref);
// 1 / (1 + alpha * voi), in (0, 1].
double voi_score(double voi, double alpha = 0.3);

// Euler characteristic and Betti numbers {b0, b1, b2} of a binary mask (D, H, W).
int64_t euler_characteristic(const torch::Tensor& mask, DigitalTopology topology = DigitalTopology::kFg26);
std::array<int64_t, 3> betti_numbers(const torch::Tensor& mask, DigitalTopology topology = DigitalTopology::kFg26);

// Feature counts per homology dimension summed over tiles: pred (p_k), ref (g_k), matched (m_k).
struct TopologyCounts {
  std::array<int64_t, 3> pred{};
  std::array<int64_t, 3> ref{};
  std::array<int64_t, 3> matched{};
};
// Betti numbers (kFg6) of each of tiles_per_axis^3 tiles of both masks; m_k = min(p_k, g_k) per
// tile (see the top of the file). tiles_per_axis >= 1.
TopologyCounts topology_counts(const torch::Tensor& pred, const torch::Tensor& ref, int64_t tiles_per_axis = 2);
// Weighted topological F1 in [0, 1] from the counts (weights 0.34, 0.33, 0.33).
double topo_score(const TopologyCounts& counts);

struct SurfaceScores {
  double surface_dice = 0.0;
  double voi_split = 0.0;  // bits
  double voi_merge = 0.0;  // bits
  double voi = 0.0;        // bits
  double voi_score = 0.0;
  std::array<int64_t, 3> betti_pred{};  // whole volume, kFg6 (the topology TopoScore uses)
  std::array<int64_t, 3> betti_ref{};
  double topo_score = 0.0;  // from topology_counts(.., 2)
  double total = 0.0;       // 0.30 topo + 0.35 surface dice + 0.35 VOI score
};
// All metrics of one case. pred, ref: (D, H, W) label volumes of the same shape (else DataError
// naming both shapes); see the top of the file for values and the ignore label.
SurfaceScores score_surface(const torch::Tensor& pred, const torch::Tensor& ref, double tolerance = 2.0,
                            std::optional<int64_t> ignore_label = 2);

}  // namespace u3d
