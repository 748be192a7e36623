// loom: everything a training program needs, in one include.
//
//   #include <loom/loom.h>
//
//   int main(int argc, char** argv) {
//     namespace nn = loom::nn;
//     auto world = loom::parallel::init(argc, argv);  // `mpirun -np 2 ./train`: 2 ranks; `./train`: 1
//     auto model = nn::Sequential(nn::Flatten(), nn::Linear(784, 10));
//     loom::parallel::DistributedDataParallel ddp(model, world);
//     loom::optim::AdamW opt(ddp->parameters(), {.lr = 1e-3});
//     loom::data::DataLoader loader(loom::data::FashionMnist::train(),
//         {.batch_size = 64, .sampler = loom::data::DistributedSampler(world->rank(), world->size())});
//     for (auto& [x, y] : loader.epoch(0)) {
//       loom::Tensor loss = nn::functional::cross_entropy(ddp->forward(x), y);
//       opt.zero_grad();
//       loss.backward();
//       opt.step();
//     }
//   }
//
// Installed, this header is <prefix>/include/loom/loom.h and the headers it
// includes sit beside it as loom/tensor/..., loom/nn/..., written inside loom
// as "tensor/tensor.h": a program compiles with both -I<prefix>/include and
// -I<prefix>/include/loom, which find_package(loom), pkg-config and
// @loom//:loom all add. Headers that are not included here (a backend's
// kernel interface, the schedules' internals) are installed too and may be
// included on their own. See docs/architecture.md, "loom as a library".
#pragma once

#include "loom/version.h"

// Tensors, devices, dtypes and every op (torch.*).
#include "tensor/allocator.h"
#include "tensor/autocast.h"
#include "tensor/blas_library.h"
#include "tensor/creation.h"
#include "tensor/cudnn_benchmark.h"
#include "tensor/device.h"
#include "tensor/device_graph.h"
#include "tensor/dtype.h"
#include "tensor/error.h"
#include "tensor/file_io.h"
#include "tensor/float8.h"
#include "tensor/flop_counter.h"
#include "tensor/fnv1a.h"
#include "tensor/generator.h"
#include "tensor/memory_budget.h"
#include "tensor/ops.h"
#include "tensor/precision.h"
#include "tensor/tensor.h"

// Autograd: the tape, no-grad scopes, activation checkpointing, gradcheck.
#include "autograd/checkpoint.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"

// Modules, layers, nn::functional, initialisation, safetensors checkpoints.
#include "nn/checkpoint.h"
#include "nn/nn.h"
#include "nn/safetensors.h"

// Optimizers, learning-rate schedules, loss scaling, whole training states.
#include "optim/async_checkpoint.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/training_checkpoint.h"

// Datasets, readers, samplers, the DataLoader.
#include "data/data.h"

// Process groups (MPI, threads, NCCL) and the device mesh.
#include "parallel/comm/agreement.h"
#include "parallel/comm/device_mesh.h"
#include "parallel/comm/for_device.h"
#include "parallel/comm/host_staged_group.h"
#include "parallel/comm/init.h"
#include "parallel/comm/mpi_group.h"
#include "parallel/comm/nccl_group.h"
#include "parallel/comm/process_group.h"
#include "parallel/comm/thread_group.h"

// The parallel strategies, and tracing.
#include "parallel/context_parallel/attention.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/context_parallel/ring_attention.h"
#include "parallel/context_parallel/sequence_split.h"
#include "parallel/context_parallel/ulysses_attention.h"
#include "parallel/data_parallel.h"
#include "parallel/parallelize.h"
#include "parallel/ddp/comm_hook.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/pipeline/balance.h"
#include "parallel/pipeline/distributed_pipeline.h"
#include "parallel/pipeline/layer_split.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/simulator.h"
#include "parallel/sharding/container_units.h"
#include "parallel/sharding/fsdp.h"
#include "parallel/sharding/fsdp_checkpoint.h"
#include "parallel/sharding/memory_model.h"
#include "parallel/sharding/sharded_grad_scaler.h"
#include "parallel/sharding/zero.h"
#include "parallel/tensor_parallel/conjugates.h"
#include "parallel/tensor_parallel/layers.h"
#include "parallel/tensor_parallel/sequence_conjugates.h"
#include "parallel/trace.h"

// Before a launch: each strategy's memory, step time and MFU on a cluster
// (the planner); GPUs' data-sheet peaks and MFU.
#include "parallel/planner/cluster.h"
#include "parallel/planner/device_table.h"
#include "parallel/planner/mfu.h"
#include "parallel/planner/model_profile.h"
#include "parallel/planner/planner.h"
#include "parallel/planner/step_time.h"

// TensorBoard event files (torch.utils.tensorboard.SummaryWriter).
#include "tensorboard/summary_writer.h"
