"""The names, shapes and order of a `trainer export`'s model.safetensors against the network
scripts/bench/pytorch_step.py builds for the same options (scripts/python/u3d_model, the one PyTorch
copy of the trainer's networks): tests/support/torch_test.sh same_names_as_export.

  same_names.py EXPORT_DIR PYTORCH_STEP_OPTIONS...     exit 0 when every name and shape matches
"""
import os
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(SRC, "scripts", "bench"))
import pytorch_step  # noqa: E402
import u3d_model  # noqa: E402  (pytorch_step put scripts/python on the path)


def main(argv):
    export_dir, options = argv[1], argv[2:]
    theirs, _ = u3d_model.read_safetensors(os.path.join(export_dir, "model.safetensors"))
    net = pytorch_step.build(pytorch_step.parse_args(options + ["--device", "cpu"]))
    ours = net.state_dict()
    names_ok = list(ours) == list(theirs) or sorted(ours) == sorted(theirs)
    shapes_ok = names_ok and all(tuple(ours[k].shape) == tuple(theirs[k].shape) for k in ours)
    print(f"pytorch_step.py {' '.join(options)}: {len(ours)} tensors, the export {len(theirs)}; names "
          f"{'equal' if names_ok else 'DIFFER'}, shapes {'equal' if shapes_ok else 'DIFFER'}")
    if not names_ok:
        print("  only in pytorch_step.py:", sorted(set(ours) - set(theirs))[:5])
        print("  only in the export:", sorted(set(theirs) - set(ours))[:5])
    elif not shapes_ok:
        bad = [k for k in ours if tuple(ours[k].shape) != tuple(theirs[k].shape)][:3]
        print("  shapes differ:", [(k, tuple(ours[k].shape), tuple(theirs[k].shape)) for k in bad])
    return 0 if shapes_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
