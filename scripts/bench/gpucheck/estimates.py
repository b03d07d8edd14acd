"""What each section's estimate is computed from: the work it launches (processes, torch imports,
cuDNN autotuning per network, steps x a step time) priced with these constants. GPU constants are
for one H100: measured in the first gpu-check on an H100 80GB HBM3 (2026-11-26, commit 4cad5c8,
docs/performance.md "Report on a GPU") and rounded up by about a quarter; those marked "not
measured" are still guesses. The report puts each estimate beside the measured
time. CPU constants price the rehearsal on a 2-core VM (measured there).

A section starts only when elapsed + its estimate fits before --deadline (less REPORT_RESERVE_S,
kept for the last report); every command's timeout ends before the deadline too."""

REPORT_RESERVE_S = 4.0

H100 = {
    "trainer_start": 2.5,      # launcher, LibTorch load, CUDA context (trainer --version: 2.3 s)
    "test_process": 1.5,       # a GoogleTest process: LibTorch load and CUDA context (listing: 0.7 s)
    "test": 1.0,               # one in-process GPU test (tiny networks: 0.01 to 0.7 s)
    "torch_import": 6.0,       # python3 -c 'import torch' + CUDA context, once per check (4.6 s)
    "roofline": 4.0,           # 8192^2 bf16 matmuls and a 2 GiB copy, 5 repetitions each
    "autotune_openkbp": 10.0,  # cuDNN autotune of the OpenKBP baseline's 3D convolutions at 128^3 (~9 s)
    "autotune_nnunet": 7.0,    # the same for the nnU-Net-like network (~5 s)
    "autotune_mlperf": 7.0,    # the same for the MLPerf 3D U-Net (~5 s)
    "capture": 6.0,            # CUDA-graph capture after the eager warm-up steps (1.5 to 8 s)
    "step_openkbp": 0.02,      # one 128^3 batch-2 bf16 step of the OpenKBP baseline (14.1 ms)
    "step_nnunet": 0.07,       # one 128^3 batch-2 bf16 step of the nnU-Net-like network (54.9 ms)
    "step_mlperf": 0.07,       # one 128^3 batch-2 bf16 step of the MLPerf 3D U-Net (53.3 ms; NVIDIA: 27.7 ms)
    "synth_small": 1.0,        # trainer synth, 32^3 phantoms (0.7 s)
    "synth_128": 6.0,          # trainer synth, 8 phantoms of 128^3 (4.8 s)
    "synth_kits": 6.0,         # trainer synth --task kits, 4 cases from 128^3 up (4.3 s)
    "tiny_step": 0.01,         # a 32^3 step of a small U-Net with the step log's loss read
    "tiny_epoch_extra": 1.0,   # per epoch: validation, checkpoint, metrics row
    "export": 1.0,             # trainer export --format safetensors (0.6 s)
    "data_row": 2.0,           # --benchmark data: seconds per measured row (--benchmark-seconds)
    "data_rows": 9,            # rows per run with --workers 1,4 (memory, pinned: 2 stages x 2; gpu: 1)
    "profile_factor": 3.0,     # profiled steps are this much slower (not measured)
    "ncu": 35.0,               # ncu over 400 kernel launches (each replayed for its counters; 27.8 s)
    "compile": 115.0,          # torch.compile of the whole OpenKBP-baseline step (inductor; ~110 s with its steps)
    "import_openkbp": 30.0,    # unpack + trainer import openkbp of the 340-case sample (not measured)
    "predict_eval": 60.0,      # --predict-only with TTA and evaluate openkbp (not measured)
    # The workflows (sections 11-14; not measured on a GPU yet): beyond training.max_minutes, which
    # counts the run's start-up and validation, the process start and the last checkpoint ...
    "wf_train_extra": 15.0,
    "wf_synth_import": 15.0,   # ... trainer synth and import of a small phantom set
    "wf_predict_eval": 20.0,   # ... predict (-i) and evaluate on a few cases
    "wf_plan_cuda": 30.0,      # ... trainer plan --device cuda: the fingerprint and measured candidates
    # The speed script (scripts/bench/speed.sh, gpucheck/sections_speed.py): the 2D slice recipe
    # (configs/slices_2d.yaml, fp16) at batch 16 and 128 (9.2 and 57.9 ms on the H100 of 2026-11-26),
    "autotune_slices": 4.0,    # cuDNN autotune of the 2D U-Net's convolutions at 256^2 (not measured)
    "step_slices16": 0.012,
    "step_slices128": 0.075,
    "compile_2d": 60.0,        # torch.compile of the 2D step, per batch (not measured)
    "conv_floor_extra": 3.0,   # conv_floor.py beyond the network's autotune: every shape alone (not measured)
    "s2d_extra": 6.0,          # conv_floor.py's OpenKBP stride-2 convolutions again as space-to-depth: 18 more autotunes (not measured)
    "norm_bench": 15.0,        # norm_bench.py: trainer start, then per layer shape (6 to 10) two cuDNN graphs built
                               # (about 1 s each) and 3 ways x 50 runs of at most a few ms (not measured)
}

CPU = {
    "trainer_start": 1.0,
    "test_list": 2.0,
    "torch_import": 5.0,
    "tiny_bench": 4.0,         # trainer --benchmark, base_filters 2, 32^3, 2 steps
    "tiny_torch_step": 6.0,    # the same step in PyTorch, eager (3 steps of ~1 s at 64^3)
    "synth_small": 1.0,
    "tiny_step": 0.03,
    "tiny_epoch_extra": 0.5,
    "export": 1.5,
    "import_openkbp": 10.0,
    "wf_openkbp": 60.0,        # the OpenKBP workflow's rehearsal after the import: 2 tiny epochs, predict, evaluate
    "wf_small": 30.0,          # a phantom workflow's rehearsal (slices, surface, nnU-Net)
}

# Heavier GPU tests (several trainer processes each): seconds, by name; every other test costs
# H100["test"]. From what each test launches (tests/gpu/*.cpp), priced like the trainer runs above.
GPU_TEST_SECONDS = {
    "GpuFixes.DeterministicCudaRunsOfBothTasksRepeatExactly": 10.0,  # measured 7.7 s on the H100
    "GpuFixes.ResumeWithGraphAndGpuCacheContinuesBitForBit": 6.0,  # 4.6 s
    "GpuFixes.GpuSamplerIsCapturedWithTheStepAndTrainsLikeTheEagerRun": 6.0,  # 4.9 s
    "GpuFixes.CaptureWhileTheSamplerThreadsSynchroniseWithTheirCopies": 10.0,  # 7.5 s
    "GpuFixes.PlanMeasuresTheRealStepAndReportsWhatDoesNotFit": 10.0,  # 7.3 s (failed at its 4th measure)
    "GpuData.TrainingWithEachPlacement": 17.0,  # 13.3 s
    "GpuData.BenchmarkMeasuresEveryPlacement": 7.0,  # 5.7 s
    "Gpu.TrainingOnCudaLowersTheLoss": 11.0,  # 8.7 s
    "GpuTrainStep.StepBenchmarkOnCudaReportsPeakMemoryAndReplays": 16.0,  # 12.4 s
    "GpuTrainStep.ResidualEncoderUNetCapturesInBf16": 8.0,  # 5.9 s
    "DataParallelCuda.NcclRanksTrainLikeThePlainRun": 7.0,  # 5.1 s
    "DataParallelCuda.CapturedNcclStepsTrainLikeEagerOnes": 8.0,  # 6.1 s
    "DataParallelCuda.WaitForDeviceGivesUpAfterTheTimeout": 4.0,  # 3.1 s
    "GpuBusy.ShareIsMeasuredOnCudaAndFallsWhenTheSamplerIsSlow": 12.0,  # 2 runs, 24 x 150 ms sleeps (not measured)
    # The kernels' tests (tests/gpu/fused_*_test.cpp, cudnn_norm_act_test.cpp; none measured yet):
    "FusedNormAct.EqualsAtenForEveryNormDtypeActivationAndShape": 4.0,  # many small cases x 3 dtypes, float64 reference
    "FusedNormAct.TrainingStepsOfEveryNetworkFollowTheUnfusedOnes": 15.0,  # 6 networks x 2 x 20 captured steps
    "FusedLoss.EqualsAtenForBothHeadsEveryDtypeAndShape": 3.0,
    "FusedLoss.DeepSupervisionWithTheKernelsFollowsWithout": 2.0,
    "FusedLoss.CapturedSegmentationStepsFollowTheUnfusedOnes": 6.0,  # 2 heads x 2 x captured steps
    "CudnnNormAct.BatchNormReluInHalfEqualsAten": 2.0,
    "CudnnNormAct.EveryNetworksPatternEqualsAtenOrIsRefusedInCudnnsWords": 8.0,  # 6 patterns x 2 graphs built
    "NormBench.TimesAtenOursAndCudnnOnOneGpu": 8.0,  # a trainer bench-norm process
}


def torch_start(check):
    """The torch process's start, counted by the first section that uses it (section 3 normally)."""
    return 0.0 if check.torch is not None or check.shared.get("plan_torch_started") else H100["torch_import"]


def test_seconds(name):
    return GPU_TEST_SECONDS.get(name, H100["test"])


def suite_seconds(tests):
    """One GoogleTest process running `tests`."""
    return H100["test_process"] + sum(test_seconds(t) for t in tests)


def trainer_bench(net, steps, warmup, graph, batch_factor=1.0):
    """trainer --benchmark of `net` (openkbp | nnunet | mlperf) on the GPU; `batch_factor`: the batch
    over the constants' batch 2 (step time taken as proportional to it; not measured)."""
    k = H100
    return (k["trainer_start"] + k["autotune_" + net] + (k["capture"] if graph else 0)
            + (steps + warmup) * k["step_" + net] * batch_factor)


def torch_step(net, steps, warmup, factor=1.0):
    """The same step in the torch process (already started)."""
    return H100["autotune_" + net] + (steps + warmup) * H100["step_" + net] * factor


def training_run(epochs, steps_per_epoch, k=H100, graph=True):
    """A tiny training run of the kill/resume section."""
    return (k["trainer_start"] + (k.get("capture", 0) if graph else 0)
            + epochs * (steps_per_epoch * k["tiny_step"] + k["tiny_epoch_extra"]))
