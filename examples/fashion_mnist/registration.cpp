#include "fashion_mnist/registration.h"

#include <lightning_cpp/core/registry.h>

#include "fashion_mnist/fashion_mnist.h"

namespace lt::examples {

namespace {
ArgSchema classifier_schema() {
  const ClassifierOptions d;
  return ArgSchema()
      .add_int("hidden", d.hidden(), "hidden layer width")
      .add_float("lr", d.lr(), "Adam learning rate")
      .add_float("weight_decay", d.weight_decay(), "Adam weight decay");
}

ClassifierOptions classifier_options(const InitArgs& a) {
  LT_CHECK_VALUE(a.get_int("hidden") >= 1, a.where(), ".hidden must be >= 1, got ", a.get_int("hidden"));
  LT_CHECK_VALUE(a.get_float("lr") > 0, a.where(), ".lr must be > 0, got ", a.get_float("lr"));
  return ClassifierOptions().hidden(a.get_int("hidden")).lr(a.get_float("lr")).weight_decay(a.get_float("weight_decay"));
}
}  // namespace

void register_fashion_mnist(Registry& registry) {
  registry.add<LightningModule>("MlpClassifier", "Fashion-MNIST MLP: 784 -> hidden -> hidden -> 10",
                                classifier_schema(), [](const InitArgs& a) {
                                  return std::make_shared<MlpClassifier>(classifier_options(a));
                                });
  registry.add<LightningModule>("CnnClassifier", "Fashion-MNIST CNN: two conv layers, two linear",
                                classifier_schema(), [](const InitArgs& a) {
                                  return std::make_shared<CnnClassifier>(classifier_options(a));
                                });
  const FashionMnistDataOptions d;
  registry.add<DataModule>("FashionMnistDataModule", "Fashion-MNIST from IDX files (55000/5000/10000)",
                           ArgSchema()
                               .add_string("data_dir", d.data_dir(), "folder with the IDX files")
                               .add_int("batch_size", d.batch_size(), "training batch size")
                               .add_int("val_size", d.val_size(), "images held out of the training set")
                               .add_int("seed", static_cast<int64_t>(d.seed()), "shuffling seed")
                               .add_int("num_workers", d.num_workers(), "loader worker threads for the training data"),
                           [](const InitArgs& a) {
                             LT_CHECK_VALUE(a.get_int("batch_size") >= 1, a.where(), ".batch_size must be >= 1, got ",
                                            a.get_int("batch_size"));
                             return std::make_shared<FashionMnistDataModule>(
                                 FashionMnistDataOptions()
                                     .data_dir(a.get_string("data_dir"))
                                     .batch_size(a.get_int("batch_size"))
                                     .val_size(a.get_int("val_size"))
                                     .seed(static_cast<uint64_t>(a.get_int("seed")))
                                     .num_workers(a.get_int("num_workers")));
                           });
}

}  // namespace lt::examples
