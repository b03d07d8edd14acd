// `trainer import <format>`: external data -> dataset file (HDF5, format v1). One subcommand per
// layout (nnunet, nifti, tiff, openkbp, dicom, images), each with its options; the ones every
// importer shares (--out, --val-fraction, --seed, --threads, --force) come from cli_options.h.
#include "cli_commands.h"
#include "cli_options.h"
#include "u3d/app/commands.h"
#include "u3d/app/dicom_command.h"
#include "u3d/app/images_command.h"

namespace u3d_cli {
namespace {

constexpr const char* kValDoc = "Share of labelled cases in split 'val'";
constexpr const char* kSeedDoc = "Seed of the val selection";
constexpr const char* kOutDoc = "Output dataset file (.h5)";

// The NIfTI importers' shared options (nnunet, nifti).
void add_nifti_common(CLI::App* a, u3d::ImportCommon& c) {
  a->add_option("--out", c.out, kOutDoc)->required();
  a->add_option("--spacing", c.spacing, "Resample to this voxel size in mm: S or D,H,W (= NIfTI z,y,x)");
  a->add_option("--normalize", c.normalize,
                "Per channel (one: all): ct | zscore | minmax | none | a data.normalize spec; default from the "
                "channel names as nnU-Net (CT -> ct, else zscore)")
      ->delimiter(',');
  add_val_fraction(a, c.val_fraction, kValDoc);
  add_seed(a, c.seed, kSeedDoc);
  add_threads(a, c.threads, "Threads; 0: every core");
  add_force(a, c.force);
}

void add_import_nnunet(CLI::App* import, Commands& commands) {
  auto [a, c] = commands.add<u3d::ImportNnunetCommand>(
      *import, "nnunet", "nnU-Net v2 raw dataset (dataset.json, imagesTr, labelsTr, imagesTs; NIfTI)",
      u3d::import_nnunet_command);
  a->add_option("--source", c.source, "DatasetXXX_Name folder")->required();
  add_nifti_common(a, c.common);
}

void add_import_nifti(CLI::App* import, Commands& commands) {
  auto [a, c] = commands.add<u3d::ImportNiftiCommand>(*import, "nifti", "Plain folders of NIfTI images and labels",
                                                      u3d::import_nifti_command);
  a->add_option("--images", c.images, "Folder of images (.nii.gz, .nii)")->required();
  a->add_option("--labels", c.labels, "Folder of <case>.nii.gz label files (optional)");
  a->add_option("--channel-suffixes", c.channel_suffixes,
                "Channels by file-name suffix, e.g. _0000,_0001; default: one channel")
      ->delimiter(',');
  a->add_option("--channel-names", c.channel_names, "Channel names, e.g. t1,flair")->delimiter(',');
  a->add_option("--classes", c.classes, "Class names, background first; default: found from the labels")
      ->delimiter(',');
  add_nifti_common(a, c.common);
}

void add_import_tiff(CLI::App* import, Commands& commands) {
  auto [a, c] = commands.add<u3d::ImportTiffCommand>(
      *import, "tiff", "Folders of 3D TIFF volumes (multi-page, one page per slice), images and labels paired by name",
      u3d::import_tiff_command);
  a->add_option("--images", c.images, "Folder of images (.tif, .tiff)")->required();
  a->add_option("--labels", c.labels, "Folder of label volumes named as the images (optional)");
  a->add_option("--out", c.common.out, kOutDoc)->required();
  a->add_option("--ignore-label", c.ignore_label,
                "Label of unlabeled voxels (e.g. 2), excluded from losses and metrics; -1: none")
      ->check(number_in(-1, 255, Whole::kYes))
      ->capture_default_str();
  a->add_option("--spacing", c.common.spacing,
                "Voxel size of the volumes in mm: S or D,H,W (TIFF records none; default 1)");
  add_val_fraction(a, c.common.val_fraction, kValDoc);
  add_seed(a, c.common.seed, kSeedDoc);
  add_threads(a, c.common.threads, "Threads; 0: every core");
  add_force(a, c.common.force);
}

void add_import_openkbp(CLI::App* import, Commands& commands) {
  auto [a, c] = commands.add<u3d::ImportOpenKbpCommand>(
      *import, "openkbp", "OpenKBP CSV folders (provided-data or pt_* folders)", u3d::import_openkbp_command);
  a->add_option("--source", c.source, "provided-data folder or a folder of pt_* folders")->required();
  a->add_option("--out", c.out, kOutDoc)->required();
  add_force(a, c.force);
  add_threads(a, c.threads, "Parsing threads; 0: every core");
  a->add_option("--split", c.split, "Split name for a plain folder of pt_* folders")->capture_default_str();
}

void add_import_dicom(CLI::App* import, Commands& commands) {  // docs/dicom.md
  auto [a, c] = commands.add<u3d::ImportDicomCommand>(
      *import, "dicom", "DICOM / DICOM-RT folder tree (CT or MR series, RT Structure Set, RT Dose)",
      u3d::import_dicom_command);
  a->add_option("--source", c.source, "Folder of DICOM files (any depth, any names)")->required();
  a->add_option("--out", c.out, kOutDoc)->required();
  a->add_option("--task", c.task, "dose (RT Dose target) or segmentation (label map)")->capture_default_str();
  a->add_option("--structures", c.structures, "YAML map 'channel: [structure names]'");
  a->add_option("--series", c.series, "SeriesInstanceUID of the image series to import");
  a->add_flag("--skip-bad", c.skip_bad,
              "Leave out an unusable patient (one line) and go on: the default, kept as an alias");
  a->add_flag("--strict", c.strict, "Refuse the import if any patient is unusable");
  a->add_flag("--anonymize", c.anonymize, "Case ids case_000...; no names or paths written");
  add_val_fraction(a, c.val_fraction, kValDoc);
  add_seed(a, c.seed, kSeedDoc);
  add_force(a, c.force);
}

void add_import_images(CLI::App* import, Commands& commands) {  // docs/slices.md
  auto [a, c] = commands.add<u3d::ImportImagesCommand>(
      *import, "images", "Folders of 2D PNG/TIFF slices and masks paired by name, stacked into one case per patient",
      u3d::import_images_command);
  auto& o = c.options;
  a->add_option("--images", o.images, "Folder of slices (.png, .tif, .tiff)")->required();
  a->add_option("--labels", o.labels, "Folder of masks (default: beside the images)");
  a->add_option("--out", c.out, kOutDoc)->required();
  a->add_option("--group", o.group,
                "Regex whose one capture group names a slice's case (default: the name up to its last _ or - "
                "digit run)");
  a->add_option("--mask-suffix", o.mask_suffix, "A mask's name: the image's + this")->capture_default_str();
  a->add_flag("--skip-unpaired", o.skip_unpaired, "Leave out images without mask and masks without image (one line)");
  add_val_fraction(a, o.val_fraction, "Share of the cases in split 'val'");
  add_test_fraction(a, o.test_fraction, "Share of the cases in split 'test'");
  add_seed(a, o.seed, "Seed of the val and test selection");
  a->add_option("--reference-out", o.reference_out,
                "Also write each case's labels as DIR/<case>.tif (for evaluate segmentation)");
  add_threads(a, o.threads, "Threads; 0: every core");
  add_force(a, c.force);
}

}  // namespace

void add_import_commands(CLI::App& app, Commands& commands) {
  auto* import = app.add_subcommand("import", "Convert external data into a dataset file (HDF5, format v1)");
  import->require_subcommand(1);
  add_import_nnunet(import, commands);
  add_import_nifti(import, commands);
  add_import_tiff(import, commands);
  add_import_openkbp(import, commands);
  add_import_dicom(import, commands);
  add_import_images(import, commands);
}

}  // namespace u3d_cli
