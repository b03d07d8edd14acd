// Ctrl-C is answered within half a second in the phases of training that can take long (loading the
// data, validating; inside a long training step with one line from the signal handler, the step
// ending first, as ever): a real trainer process, a real SIGINT; the
// usual stop line (docs/reliability.md, scenario 6; the checkpoint committed when there is one) is
// printed within 0.5 s of the signal and the process exits 130 (LibTorch's teardown follows the
// line: about 0.3 s more on an idle 2-core machine).
#include <signal.h>

#include <chrono>
#include <thread>

#include "fault_support.h"

namespace u3d {
namespace {

using test::TrainerProcess;
using Clock = std::chrono::steady_clock;

class StopLatency : public test::PhantomRunTest {};

// A SIGINT while a val case is predicted (slowed to 30 s by the slow_val fault, which a stop
// signal ends as it ends a real case between its batches of windows): the run checkpoints after
// the epoch's last step within 0.5 s; the status line showed N/N, then the validating phase.
TEST_F(StopLatency, SigintDuringValidationEndsTheRunWithinHalfASecond) {
  config("v", {{"training.epochs", "2"}, {"training.steps_per_epoch", "20"}, {"logging.progress", "bar"}});
  test::ProcessOptions slow = test::with_faults("slow_val@30000");
  TrainerProcess p({"--config", "v.yaml"}, dir.path(), slow);
  ASSERT_TRUE(p.wait_until([&] { return test::contains(p.output(), "validating epoch 1/2"); })) << p.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // inside the first case
  const auto signalled = Clock::now();
  p.signal(SIGINT);
  ASSERT_TRUE(p.wait_until([&] { return test::contains(p.output(), "stopped by SIGINT at epoch 1 step 20"); }))
      << p.output();
  const double seconds = std::chrono::duration<double>(Clock::now() - signalled).count();
  EXPECT_LT(seconds, 0.5) << p.output();  // the checkpoint committed and named
  EXPECT_EQ(p.wait(/*timeout_seconds=*/10), 130) << p.output();
  EXPECT_TRUE(test::contains(p.output(), "20/20 [")) << "the status line reached N/N\n" << p.output();
}

// A SIGINT inside a training step of 3 s (the slow_step fault, deaf to signals as a long GPU step is):
// answered at once, from the signal handler, with what happens next; the step then ends, its
// checkpoint is written and the run exits 130, seconds later.
TEST_F(StopLatency, SigintInsideALongTrainingStepIsAnsweredAtOnce) {
  config("s", {{"training.epochs", "1"}, {"training.steps_per_epoch", "3"}});
  test::ProcessOptions slow = test::with_faults("slow_step@3000");
  TrainerProcess p({"--config", "s.yaml"}, dir.path(), slow);
  ASSERT_TRUE(p.wait_until([&] { return test::contains(p.output(), "training step: "); })) << p.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // inside the first step's 3 s
  const auto signalled = Clock::now();
  p.signal(SIGINT);
  ASSERT_TRUE(p.wait_until([&] {
    return test::contains(p.output(), "[trainer] SIGINT received: the run stops after the current step");
  })) << p.output();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - signalled).count(), 0.5) << p.output();
  ASSERT_TRUE(p.wait_until([&] { return test::contains(p.output(), "stopped by SIGINT at epoch 1 step 1"); }))
      << p.output();
  EXPECT_GT(std::chrono::duration<double>(Clock::now() - signalled).count(), 1.5)
      << "the answer came while the step still ran\n"
      << p.output();
  EXPECT_EQ(p.wait(/*timeout_seconds=*/10), 130) << p.output();
}

// A SIGINT while the cases load (60 cases of 48^3: seconds of reading on one thread): the load ends
// before the next case, nothing is written, the usual line within 0.5 s, exit 130.
TEST_F(StopLatency, SigintWhileLoadingTheDataEndsTheRunWithinHalfASecond) {
  test::make_phantom(dir / "big.h5", Task::kDose, /*cases=*/60, /*size=*/48);
  config("l", {}, "big.h5");
  TrainerProcess p({"--config", "l.yaml"}, dir.path());
  ASSERT_TRUE(p.wait_until([&] { return test::contains(p.output(), "data: loading "); })) << p.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // inside the load
  const auto signalled = Clock::now();
  p.signal(SIGINT);
  ASSERT_TRUE(p.wait_until([&] {
    return test::contains(p.output(), "stopped by SIGINT before training started; nothing to save");
  })) << p.output();
  const double seconds = std::chrono::duration<double>(Clock::now() - signalled).count();
  EXPECT_LT(seconds, 0.5) << p.output();
  EXPECT_EQ(p.wait(/*timeout_seconds=*/10), 130) << p.output();
  EXPECT_FALSE(test::contains(p.output(), "data: training cache")) << "the load did not finish\n" << p.output();
  EXPECT_FALSE(fs::exists(ckpts("l"))) << "nothing written";
}

}  // namespace
}  // namespace u3d
