#include "u3d/model/checkpointing.h"

#include <ATen/autocast_mode.h>

#include <optional>
#include <utility>
#include <vector>

namespace u3d {
namespace {

constexpr at::DeviceType kAutocastDevices[] = {at::kCPU, at::kCUDA};

struct AutocastState {
  at::DeviceType device;
  bool enabled;
  at::ScalarType dtype;
};

std::vector<AutocastState> autocast_state() {
  std::vector<AutocastState> out;
  for (const auto d : kAutocastDevices) {
    out.push_back({d, at::autocast::is_autocast_enabled(d), at::autocast::get_autocast_dtype(d)});
  }
  return out;
}

// Sets an autocast state for its lifetime (cast cache off: nothing outlives the recomputation).
class AutocastScope {
 public:
  explicit AutocastScope(const std::vector<AutocastState>& state)
      : previous_(autocast_state()), cache_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
    for (const auto& s : state) apply(s);
  }
  ~AutocastScope() {
    for (const auto& s : previous_) apply(s);
    at::autocast::set_autocast_cache_enabled(cache_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  static void apply(const AutocastState& s) {
    at::autocast::set_autocast_enabled(s.device, s.enabled);
    at::autocast::set_autocast_dtype(s.device, s.dtype);
  }
  std::vector<AutocastState> previous_;
  bool cache_;
};

// The random-number generators a stage may draw from: the CPU one and, when the input is on CUDA,
// that device's.
std::vector<at::Generator> generators(const torch::Tensor& x) {
  std::vector<at::Generator> out = {at::globalContext().defaultGenerator(c10::Device(at::kCPU))};
  if (x.is_cuda()) out.push_back(at::globalContext().defaultGenerator(x.device()));
  return out;
}

std::vector<torch::Tensor> generator_states(std::vector<at::Generator> gens) {  // handles: copies share the state
  std::vector<torch::Tensor> out;
  for (auto& g : gens) {
    std::lock_guard<std::mutex> lock(g.mutex());
    out.push_back(g.get_state());
  }
  return out;
}

void set_generator_states(std::vector<at::Generator>& gens, const std::vector<torch::Tensor>& states) {
  for (size_t i = 0; i < gens.size(); ++i) {
    std::lock_guard<std::mutex> lock(gens[i].mutex());
    gens[i].set_state(states[i]);
  }
}

// What the backward pass needs besides the saved input: kept in the autograd context as a capsule.
struct Stage : torch::CustomClassHolder {
  std::shared_ptr<torch::nn::Module> module;
  StageFn fn;
  std::vector<AutocastState> autocast;
  bool preserve_rng = false;
  std::vector<torch::Tensor> rng_states;  // of generators(x), at the forward
};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `params`: the stage's parameters, inputs of the function so that their gradients flow.
  static torch::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<Stage> stage, const torch::Tensor& x,
                               at::TensorList params) {
    (void)params;
    stage->autocast = autocast_state();
    if (stage->preserve_rng) stage->rng_states = generator_states(generators(x));
    ctx->save_for_backward({x});
    torch::Tensor y = stage->fn(x);  // autograd is off here (Function::apply)
    ctx->saved_data["stage"] = c10::IValue::make_capsule(std::move(stage));
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto stage = c10::static_intrusive_pointer_cast<Stage>(ctx->saved_data["stage"].toCapsule());
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const std::vector<torch::Tensor> params = stage->module->parameters();
    variable_list out(2 + params.size());  // (stage: none, x, params...)
    if (grad_out.empty() || !grad_out[0].defined()) return out;

    torch::Tensor input = x.detach();
    input.requires_grad_(x.requires_grad());
    std::vector<torch::Tensor> buffers = stage->module->buffers();
    std::vector<torch::Tensor> kept;
    {
      torch::NoGradGuard no_grad;
      for (const auto& b : buffers) kept.push_back(b.clone());
    }
    std::vector<at::Generator> gens;
    std::vector<torch::Tensor> now;
    if (stage->preserve_rng) {
      gens = generators(x);
      now = generator_states(gens);
      set_generator_states(gens, stage->rng_states);
    }
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      AutocastScope autocast(stage->autocast);
      y = stage->fn(input);
    }
    if (stage->preserve_rng) set_generator_states(gens, now);

    std::vector<torch::Tensor> wrt;
    std::vector<size_t> slot;  // position in `out` of each entry of `wrt`
    if (input.requires_grad()) {
      wrt.push_back(input);
      slot.push_back(1);
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].requires_grad()) continue;
      wrt.push_back(params[i]);
      slot.push_back(2 + i);
    }
    variable_list grads;
    if (!wrt.empty()) {
      grads = torch::autograd::grad({y}, wrt, {grad_out[0]}, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    {  // after the recomputed graph's backward, which saved the buffers (batch norm's running statistics)
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(kept[i]);
    }
    for (size_t i = 0; i < grads.size(); ++i) out[slot[i]] = grads[i];
    return out;
  }
};

}  // namespace

torch::Tensor run_checkpointed(const std::shared_ptr<torch::nn::Module>& stage, StageFn fn, const torch::Tensor& x,
                               bool preserve_rng) {
  auto holder = c10::make_intrusive<Stage>();
  holder->module = stage;
  holder->fn = std::move(fn);
  holder->preserve_rng = preserve_rng;
  const std::vector<torch::Tensor> params = stage->parameters();
  return CheckpointFunction::apply(std::move(holder), x, at::TensorList(params));
}

}  // namespace u3d
