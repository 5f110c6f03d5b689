#pragma once
// lightning-cpp for users: one include for everything a training program
// writes against (docs/architecture.md lists the layers behind it).
//
//   #include <lightning_cpp/lightning.h>
//
//   struct Net : lt::LightningModule { ... };
//   lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).devices(2).strategy("ddp"));
//   trainer.fit(std::make_shared<Net>(), std::make_shared<MyData>());
//
// or, keeping your own loop: lt::Fabric (fabric/fabric.h).
//
// Headers not reached from here (the Join machinery under plugins/join, the
// distributed layer under plugins/distributed, DDP's Reducer wrapper) are for
// those who write a strategy; a training program needs none of them.

#include <lightning_cpp/callbacks/device_stats_monitor.h>
#include <lightning_cpp/callbacks/early_stopping.h>
#include <lightning_cpp/callbacks/gradient_accumulation_scheduler.h>
#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/lr_monitor.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/callbacks/model_summary.h>
#include <lightning_cpp/callbacks/progress_bar.h>
#include <lightning_cpp/callbacks/throughput_monitor.h>
#include <lightning_cpp/callbacks/timer.h>
#include <lightning_cpp/cli/cli.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/cpu.h>
#include <lightning_cpp/core/data_module.h>
#include <lightning_cpp/core/deferred_tensor.h>
#include <lightning_cpp/core/fused_optimizer.h>
#include <lightning_cpp/core/grad_norm.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/optimizer_state.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/core/throughput.h>
#include <lightning_cpp/core/version.h>
#include <lightning_cpp/data/batch_sampler.h>
#include <lightning_cpp/data/collate.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/dataset.h>
#include <lightning_cpp/data/distributed_sampler.h>
#include <lightning_cpp/data/iterable_dataset.h>
#include <lightning_cpp/data/sampler.h>
#include <lightning_cpp/fabric/fabric.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/loggers/logger_collection.h>
#include <lightning_cpp/loggers/mlflow.h>
#include <lightning_cpp/loggers/tensorboard.h>
#include <lightning_cpp/plugins/io/sharded_checkpoint.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>
#include <lightning_cpp/plugins/launchers/error_file.h>
#include <lightning_cpp/plugins/precision/precision.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/plugins/strategies/fsdp/fsdp.h>
#include <lightning_cpp/plugins/strategies/single_device.h>
#include <lightning_cpp/trainer/trainer.h>
#include <lightning_cpp/tuner/tuning.h>
