#include "u3d/train/distributed.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/ranges.h>
#include <net/if.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "rendezvous.h"
#include "u3d/core/errors.h"

namespace u3d {

struct Distributed::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  int64_t failures = 0;                            // describe_failure() calls (each uses its own store keys)
  c10::intrusive_ptr<c10d::ProcessGroup> control;  // Gloo on the CPU: host decisions (= group without NCCL)
};

namespace {

// all_reduce as an autograd function: forward the sum over ranks, backward the sum of the
// gradients over ranks (every rank's loss depends on every rank's input).
struct RankSum : torch::autograd::Function<RankSum> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t dist) {
    ctx->saved_data["dist"] = dist;
    return reduced(x, dist);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {reduced(grads[0], ctx->saved_data["dist"].toInt()), torch::Tensor()};
  }
  static torch::Tensor reduced(const torch::Tensor& x, int64_t dist) {
    auto* d = reinterpret_cast<Distributed*>(static_cast<intptr_t>(dist));  // outlives every step
    torch::Tensor y = x.detach().to(d->comm_device()).contiguous().clone();
    d->all_reduce_(y);
    return y.to(x.device());
  }
};

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

// "1, 3" from {1, 3}.
std::string rank_list(const std::vector<int64_t>& ranks) { return fmt::format("{}", fmt::join(ranks, ", ")); }

}  // namespace

std::unique_ptr<Distributed> Distributed::join(const LaunchEnv& env, const TrainingConfig& cfg,
                                               const torch::Device& device) {
  std::unique_ptr<Distributed> d(new Distributed());
  d->impl_ = std::make_unique<Impl>();
  d->env_ = env;
  d->timeout_s_ = cfg.dist_timeout_s;
  const bool nccl =
      cfg.dist_backend == DistBackend::kNccl || (cfg.dist_backend == DistBackend::kAuto && device.is_cuda());
  if (nccl && !device.is_cuda()) {
    throw ConfigError(
        fmt::format("training.dist_backend: nccl needs CUDA, and training runs on {}; use gloo or auto", device.str()));
  }
#ifndef USE_C10D_NCCL
  if (nccl) throw ConfigError("training.dist_backend: nccl: this build of LibTorch has no NCCL; use gloo");
#endif
  d->backend_name_ = nccl ? "nccl" : "gloo";
  d->comm_device_ = nccl ? device : torch::Device(torch::kCPU);
  const auto timeout = to_ms(cfg.dist_timeout_s);
  const int rank = static_cast<int>(env.rank), size = static_cast<int>(env.world_size);
  // The store and the roll call within one training.dist_timeout_s (rendezvous.h: each failure one
  // line of ours), then the groups.
  rendezvous_detail::quiet_c10d_logs();
  // Gloo (also the host-side group beside NCCL) binds this interface; its own error is an assertion.
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface && ::if_nametoindex(iface) == 0) {
    throw ConfigError(fmt::format("environment: GLOO_SOCKET_IFNAME='{}': no such network interface on this node ({})",
                                  iface, env.describe()));
  }
  const auto deadline = rendezvous_detail::Clock::now() + timeout;
  auto tcp = rendezvous_detail::connect_store(env, deadline, cfg.dist_timeout_s);
  tcp->setTimeout(timeout);
  // As torch.distributed's env:// rendezvous: keys of an earlier attempt (torchrun restart) apart.
  d->impl_->store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("/worker/attempt_{}", env.restart_count), tcp);
  rendezvous_detail::check_in(d->impl_->store, env, deadline, cfg.dist_timeout_s);
  try {
    auto group_store = c10::make_intrusive<c10d::PrefixStore>("u3d", d->impl_->store);
    d->impl_->group = c10::make_intrusive<c10d::ProcessGroup>(group_store, rank, size);
    // A Gloo group on the CPU (its own keys), as torch.distributed's new_group(backend="gloo").
    auto gloo = [&](const c10::intrusive_ptr<c10d::Store>& store) {
      auto o = c10d::ProcessGroupGloo::Options::create(timeout);
      if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface) {
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(iface));
      } else {
        o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, o);
      backend->setSequenceNumberForGroup();
      return backend;
    };
    if (nccl) {
#ifdef USE_C10D_NCCL
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = timeout;
      auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(group_store, rank, size, o);
      backend->setSequenceNumberForGroup();
      d->impl_->group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
      d->impl_->group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, backend);
#endif
    } else {
      auto backend = gloo(group_store);
      d->impl_->group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
      d->impl_->group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
      if (device.is_cuda()) {
        d->impl_->group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, backend);
      }
    }
    if (nccl) {
      auto control_store = c10::make_intrusive<c10d::PrefixStore>("u3d_control", d->impl_->store);
      d->impl_->control = c10::make_intrusive<c10d::ProcessGroup>(control_store, rank, size);
      d->impl_->control->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
      d->impl_->control->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo(control_store));
    } else {
      d->impl_->control = d->impl_->group;
    }
  } catch (const std::exception& e) {
    // Every rank checked in: the ranks' own connections (Gloo, NCCL) failed.
    spdlog::debug("c10d: {}", error_line(e));
    throw DistributedError(
        fmt::format("{}: every rank joined the store at {}:{}, but the {} connections between the ranks failed within "
                    "training.dist_timeout_s {:g} s (a rank ended meanwhile, or the nodes cannot reach each other: "
                    "GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, a firewall)",
                    env.describe(), env.store_host, env.store_port, d->backend_name_, cfg.dist_timeout_s));
  }
  spdlog::info("distributed: {} ranks over {} (c10d), store {}:{}{}; this is {}", size, d->backend_name_,
               env.store_host, env.store_port, env.agent_store ? " (torchrun's agent)" : "", env.describe());
  return d;
}

Distributed::~Distributed() = default;

const c10::intrusive_ptr<c10d::ProcessGroup>& Distributed::group() const { return impl_->group; }

void Distributed::fail(const std::string& during, const std::exception& e) {
  spdlog::debug("c10d: {}", error_line(e));  // the backend's words: train.log at debug level only
  throw DistributedError(describe_failure(during, ""));
}

void Distributed::all_reduce_(torch::Tensor& t, bool max) {
  std::vector<torch::Tensor> tensors{t};
  c10d::AllreduceOptions o;
  o.reduceOp = max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
  try {
    impl_->group->allreduce(tensors, o)->wait();
  } catch (const std::exception& e) {
    fail("an all-reduce", e);
  }
}

torch::Tensor Distributed::sum_with_grad(const torch::Tensor& t) {
  return RankSum::apply(t, static_cast<int64_t>(reinterpret_cast<intptr_t>(this)));
}

LossOptions data_parallel_loss_options(LossOptions o, Distributed& dist) {
  o.rank_mean = [d = &dist](const torch::Tensor& count) {
    torch::Tensor c = count.detach().reshape({1}).to(d->comm_device());
    d->all_reduce_(c);
    return (c / static_cast<double>(d->world_size())).to(count.device()).reshape({});
  };
  o.rank_sum = [d = &dist](const torch::Tensor& sum) { return d->sum_with_grad(sum); };
  return o;
}

std::vector<double> Distributed::sum(const std::vector<double>& values) {
  std::vector<torch::Tensor> t{torch::tensor(values, torch::kDouble)};
  try {
    impl_->control->allreduce(t)->wait();
  } catch (const std::exception& e) {
    fail("an all-reduce of validation sums", e);
  }
  return std::vector<double>(t[0].data_ptr<double>(), t[0].data_ptr<double>() + t[0].numel());
}

void Distributed::broadcast_(std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;  // parameters are leaves that require grad
  for (auto& t : tensors) {
    std::vector<torch::Tensor> one{t.device() == comm_device_ && t.is_contiguous() ? t
                                                                                   : t.to(comm_device_).contiguous()};
    try {
      impl_->group->broadcast(one)->wait();
    } catch (const std::exception& e) {
      fail("a broadcast from rank 0", e);
    }
    if (!one[0].is_same(t)) t.copy_(one[0]);
  }
}

void Distributed::barrier() {
  try {
    impl_->control->barrier()->wait();
  } catch (const std::exception& e) {
    fail("a barrier", e);
  }
}

void Distributed::wait_for_device(const std::string& during) {
  if (!comm_device_.is_cuda()) return;
  at::cuda::CUDAEvent done;
  done.record(c10::cuda::getCurrentCUDAStream(comm_device_.index()));
  const auto deadline = std::chrono::steady_clock::now() + to_ms(timeout_s_);
  auto pause = std::chrono::microseconds(50);
  while (!done.query()) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw DistributedError(
          describe_failure(during, fmt::format("the device had not run the queued steps after {:g} s", timeout_s_)));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(2 * pause, std::chrono::microseconds(2000));
  }
}

std::vector<int> Distributed::control_max(const std::vector<int>& local) {
  std::vector<torch::Tensor> t{torch::tensor(local, torch::kInt)};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  try {
    impl_->control->allreduce(t, o)->wait();
  } catch (const std::exception& e) {
    fail("a step-boundary agreement", e);
  }
  return std::vector<int>(t[0].data_ptr<int>(), t[0].data_ptr<int>() + t[0].numel());
}

void Distributed::check_same(const std::string& what, const std::string& text, const std::string& hint) {
  // rank 0's text (length, then bytes) to every rank, on the host; each compares and flags itself.
  auto broadcast = [&](torch::Tensor& t) {
    std::vector<torch::Tensor> one{t};
    try {
      impl_->control->broadcast(one)->wait();
    } catch (const std::exception& e) {
      fail("a broadcast from rank 0", e);
    }
  };
  torch::Tensor length = torch::tensor({static_cast<int64_t>(text.size())}, torch::kLong);
  broadcast(length);
  const int64_t n = length.item<int64_t>();
  bool same = n == static_cast<int64_t>(text.size());
  if (n > 0) {
    torch::Tensor bytes = torch::zeros({n}, torch::kUInt8);
    if (is_main()) std::memcpy(bytes.data_ptr(), text.data(), static_cast<size_t>(n));
    broadcast(bytes);
    same = same && std::memcmp(bytes.data_ptr(), text.data(), static_cast<size_t>(n)) == 0;
  }
  std::vector<int> flags(static_cast<size_t>(world_size()), 0);
  if (!same) flags[static_cast<size_t>(rank())] = 1;
  flags = control_max(flags);
  std::vector<int64_t> differ;
  for (int64_t r = 0; r < world_size(); ++r) {
    if (flags[static_cast<size_t>(r)] != 0) differ.push_back(r);
  }
  if (differ.empty()) return;
  throw ConfigError(fmt::format("{} differs between ranks: rank{} {} {} from rank 0's{}", what,
                                differ.size() > 1 ? "s" : "", rank_list(differ),
                                differ.size() > 1 ? "differ" : "differs", hint.empty() ? "" : "; " + hint));
}

void Distributed::broadcast_parameters(torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors;
  std::string shapes;
  for (const auto& p : module.named_parameters()) {
    tensors.push_back(p.value());
    shapes +=
        fmt::format("{} {} {}\n", p.key(), fmt::join(p.value().sizes(), "x"), c10::toString(p.value().scalar_type()));
  }
  for (const auto& b : module.named_buffers()) {
    tensors.push_back(b.value());
    shapes +=
        fmt::format("{} {} {}\n", b.key(), fmt::join(b.value().sizes(), "x"), c10::toString(b.value().scalar_type()));
  }
  check_same("the network (parameter names and shapes)", shapes, "every rank must build the same model");
  broadcast_(tensors);
  // Verified: a float64 checksum of every tensor, printed exactly, equal on every rank.
  std::string sums;
  torch::NoGradGuard no_grad;
  for (const auto& t : tensors) {
    sums += fmt::format("{:a} ", t.to(torch::kDouble).sum().item<double>());
  }
  check_same("the network's weights after the broadcast from rank 0", sums);
}

std::string Distributed::describe_failure(const std::string& during, const std::string& what) {
  // Every surviving rank marks itself; after a short wait, the ranks without a mark are gone.
  const int64_t attempt = ++impl_->failures;
  const std::string detail = what.empty() ? "" : "; " + what;
  // On a thread of its own, for at most 8 s: a store whose host hangs (stopped, deadlocked) never
  // answers, and c10d's queries have no timeout of their own.
  auto gone_box = std::make_shared<std::vector<int64_t>>();
  bool answered = false;
  try {
    answered = rendezvous_detail::finishes_by(
        std::chrono::steady_clock::now() + std::chrono::seconds(8),
        [store = impl_->store, gone_box, attempt, me = rank(), world = world_size()] {
          store->set(fmt::format("u3d_alive/{}/{}", attempt, me), std::vector<uint8_t>{1});
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          for (;;) {
            std::vector<int64_t> gone;
            for (int64_t r = 0; r < world; ++r) {
              if (!store->check({fmt::format("u3d_alive/{}/{}", attempt, r)})) gone.push_back(r);
            }
            *gone_box = gone;
            if (gone.empty() || std::chrono::steady_clock::now() > deadline) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        });
  } catch (const std::exception&) {
  }
  if (!answered) {
    // The store itself is gone, or its host does not answer: rank 0 under srun, torchrun's agent.
    return fmt::format("{}: {} failed and the rendezvous store at {}:{} is gone too or does not answer ({}){}",
                       env_.describe(), during, env_.store_host, env_.store_port,
                       env_.agent_store ? "torchrun's agent ended or hangs" : "rank 0 hosts it: it ended or hangs",
                       detail);
  }
  const std::vector<int64_t> gone = *gone_box;
  if (gone.empty()) {
    return fmt::format(
        "{}: {} failed on this rank while every rank is alive{}", env_.describe(), during,
        what.empty()
            ? fmt::format(" (a network error between the ranks, or longer than training.dist_timeout_s {:g} s)",
                          timeout_s_)
            : detail);
  }
  return fmt::format(
      "{}: {} failed: rank{} {} crashed, was killed or hung (no answer within training.dist_timeout_s "
      "{:g} s){}",
      env_.describe(), during, gone.size() > 1 ? "s" : "", rank_list(gone), timeout_s_, detail);
}

}  // namespace u3d
