"""What each section's estimate is computed from: the work it launches (processes, torch imports,
cuDNN autotuning per network, steps x a step time) priced with these constants. GPU constants are
for one H100 and are guesses from the work's size, not measurements (no GPU had run gpu-check when
they were written): the report puts each estimate beside the measured time, so the first run on a
GPU shows how far off they are. CPU constants price the rehearsal on a 2-core VM (measured there).

A section starts only when elapsed + its estimate fits before --deadline (less REPORT_RESERVE_S,
kept for the last report); every command's timeout ends before the deadline too."""

REPORT_RESERVE_S = 4.0

H100 = {
    "trainer_start": 5.0,      # launcher, LibTorch load, CUDA context (bundle or build tree)
    "test_process": 5.0,       # a GoogleTest process: LibTorch load and CUDA context
    "test": 6.0,               # one in-process GPU test (tiny networks)
    "torch_import": 10.0,      # python3 -c 'import torch' + CUDA context, once per check
    "roofline": 4.0,           # 8192^2 bf16 matmuls and a 2 GiB copy, 5 repetitions each
    "autotune_openkbp": 15.0,  # cuDNN autotune of the OpenKBP baseline's 3D convolutions at 128^3
    "autotune_nnunet": 20.0,   # the same for the nnU-Net-like network (more layers)
    "autotune_mlperf": 20.0,   # the same for the MLPerf 3D U-Net (6 levels)
    "capture": 3.0,            # CUDA-graph capture after the eager warm-up steps
    "step_openkbp": 0.05,      # one 128^3 batch-2 bf16 step of the OpenKBP baseline (1.29 TFLOP)
    "step_nnunet": 0.20,       # one 128^3 batch-2 bf16 step of the nnU-Net-like network (~5.7 TFLOP)
    "step_mlperf": 0.03,       # one 128^3 batch-2 bf16 step of the MLPerf 3D U-Net (5.7 TFLOP; NVIDIA: 27.7 ms)
    "synth_small": 3.0,        # trainer synth, 32^3 phantoms
    "synth_128": 20.0,         # trainer synth, 8 phantoms of 128^3
    "synth_kits": 15.0,        # trainer synth --task kits, 4 cases from 128^3 up
    "tiny_step": 0.01,         # a 32^3 step of a small U-Net with the step log's loss read
    "tiny_epoch_extra": 1.0,   # per epoch: validation, checkpoint, metrics row
    "export": 4.0,             # trainer export --format safetensors
    "data_row": 2.0,           # --benchmark data: seconds per measured row (--benchmark-seconds)
    "data_rows": 9,            # rows per run with --workers 1,4 (memory, pinned: 2 stages x 2; gpu: 1)
    "profile_factor": 3.0,     # profiled steps are this much slower
    "ncu": 90.0,               # ncu over 400 kernel launches (each replayed for its counters)
    "compile": 100.0,          # torch.compile of the whole OpenKBP-baseline step (inductor, autotune)
    "import_openkbp": 30.0,    # unpack + trainer import openkbp of the 340-case sample
    "predict_eval": 60.0,      # --predict-only with TTA and evaluate openkbp
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
}

# Heavier GPU tests (several trainer processes each): seconds, by name; every other test costs
# H100["test"]. From what each test launches (tests/gpu/*.cpp), priced like the trainer runs above.
GPU_TEST_SECONDS = {
    "GpuFixes.DeterministicCudaRunsOfBothTasksRepeatExactly": 40.0,
    "GpuFixes.ResumeWithGraphAndGpuCacheContinuesBitForBit": 20.0,
    "GpuFixes.GpuSamplerIsCapturedWithTheStepAndTrainsLikeTheEagerRun": 20.0,
    "GpuFixes.CaptureWhileTheSamplerThreadsSynchroniseWithTheirCopies": 12.0,
    "GpuFixes.PlanMeasuresTheRealStepAndReportsWhatDoesNotFit": 20.0,
    "GpuData.TrainingWithEachPlacement": 30.0,
    "GpuData.BenchmarkMeasuresEveryPlacement": 20.0,
    "Gpu.TrainingOnCudaLowersTheLoss": 15.0,
    "GpuTrainStep.StepBenchmarkOnCudaReportsPeakMemoryAndReplays": 15.0,
    "DataParallelCuda.NcclRanksTrainLikeThePlainRun": 30.0,
    "DataParallelCuda.CapturedNcclStepsTrainLikeEagerOnes": 30.0,
    "DataParallelCuda.WaitForDeviceGivesUpAfterTheTimeout": 15.0,
}


def torch_start(check):
    """The torch process's start, counted by the first section that uses it (section 3 normally)."""
    return 0.0 if check.torch is not None or check.shared.get("plan_torch_started") else H100["torch_import"]


def test_seconds(name):
    return GPU_TEST_SECONDS.get(name, H100["test"])


def suite_seconds(tests):
    """One GoogleTest process running `tests`."""
    return H100["test_process"] + sum(test_seconds(t) for t in tests)


def trainer_bench(net, steps, warmup, graph):
    """trainer --benchmark of `net` (openkbp | nnunet | mlperf) on the GPU."""
    k = H100
    return (k["trainer_start"] + k["autotune_" + net] + (k["capture"] if graph else 0)
            + (steps + warmup) * k["step_" + net])


def torch_step(net, steps, warmup, factor=1.0):
    """The same step in the torch process (already started)."""
    return H100["autotune_" + net] + (steps + warmup) * H100["step_" + net] * factor


def training_run(epochs, steps_per_epoch, k=H100, graph=True):
    """A tiny training run of the kill/resume section."""
    return (k["trainer_start"] + (k.get("capture", 0) if graph else 0)
            + epochs * (steps_per_epoch * k["tiny_step"] + k["tiny_epoch_extra"]))
