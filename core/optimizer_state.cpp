#include <lightning_cpp/core/optimizer_state.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/serialize/archive.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/deferred_tensor.h>
#include <lightning_cpp/core/types.h>

namespace lt {

namespace {

using torch::optim::Optimizer;
using Betas = std::tuple<double, double>;

// Each optimizer's options and per-parameter state, by PyTorch's names.
template <typename V>
void visit(torch::optim::SGDOptions& o, V&& v) {
  v("lr", o.lr());
  v("momentum", o.momentum());
  v("dampening", o.dampening());
  v("weight_decay", o.weight_decay());
  v("nesterov", o.nesterov());
}
template <typename V>
void visit(torch::optim::SGDParamState& s, V&& v) {
  v("momentum_buffer", s.momentum_buffer());
}
template <typename Options, typename V>
void visit_adam(Options& o, V&& v) {
  v("lr", o.lr());
  v("betas", o.betas());
  v("eps", o.eps());
  v("weight_decay", o.weight_decay());
  v("amsgrad", o.amsgrad());
}
template <typename State, typename V>
void visit_adam_state(State& s, V&& v) {
  v("step", s.step());
  v("exp_avg", s.exp_avg());
  v("exp_avg_sq", s.exp_avg_sq());
  v("max_exp_avg_sq", s.max_exp_avg_sq());
}
template <typename V>
void visit(torch::optim::AdamOptions& o, V&& v) {
  visit_adam(o, v);
}
template <typename V>
void visit(torch::optim::AdamParamState& s, V&& v) {
  visit_adam_state(s, v);
}
template <typename V>
void visit(torch::optim::AdamWOptions& o, V&& v) {
  visit_adam(o, v);
}
template <typename V>
void visit(torch::optim::AdamWParamState& s, V&& v) {
  visit_adam_state(s, v);
}
template <typename V>
void visit(torch::optim::RMSpropOptions& o, V&& v) {
  v("lr", o.lr());
  v("alpha", o.alpha());
  v("eps", o.eps());
  v("weight_decay", o.weight_decay());
  v("momentum", o.momentum());
  v("centered", o.centered());
}
template <typename V>
void visit(torch::optim::RMSpropParamState& s, V&& v) {
  v("step", s.step());
  v("square_avg", s.square_avg());
  v("momentum_buffer", s.momentum_buffer());
  v("grad_avg", s.grad_avg());
}
template <typename V>
void visit(torch::optim::AdagradOptions& o, V&& v) {
  v("lr", o.lr());
  v("lr_decay", o.lr_decay());
  v("weight_decay", o.weight_decay());
  v("initial_accumulator_value", o.initial_accumulator_value());
  v("eps", o.eps());
}
template <typename V>
void visit(torch::optim::AdagradParamState& s, V&& v) {
  v("step", s.step());
  v("sum", s.sum());
}

// A list, or a tuple: LibTorch 1.13's unpickler cannot read a Python list of
// one element (pickle's APPEND), so such a list is saved as a tuple.
bool is_sequence(const c10::IValue& v) { return v.isList() || v.isTuple(); }
std::vector<c10::IValue> sequence(const c10::IValue& v) {
  if (v.isTuple()) return v.toTupleRef().elements().vec();
  if (v.isList()) return v.toListRef().vec();
  return {};
}

// Writes each visited field into a dict; an undefined tensor (no momentum,
// no amsgrad) is left out, as PyTorch leaves it out.
struct Put {
  StateDict& out;
  void operator()(const char* name, const torch::Tensor& t) const {
    if (t.defined()) out.insert(name, t);
  }
  void operator()(const char* name, const Betas& b) const {
    out.insert(name, c10::ivalue::Tuple::create(std::get<0>(b), std::get<1>(b)));
  }
  template <typename T>
  void operator()(const char* name, const T& value) const {
    out.insert(name, value);
  }
};

// Reads each visited field from a dict, checked; a missing option keeps its
// value, a missing tensor is undefined, a tensor takes the parameter's shape,
// device and (floating) dtype, as PyTorch's load_state_dict casts.
struct Get {
  const StateDict& in;
  const std::string& where;
  const torch::Tensor* parameter;  // null for a group's options
  std::vector<std::string>* names = nullptr;  // the names visited
  bool copy = true;  // tensors copied (else the given ones, where dtype and device fit)
  const c10::IValue* find(const char* name) const {
    if (names != nullptr) names->emplace_back(name);
    auto it = in.find(name);
    return it == in.end() ? nullptr : &it->value();
  }
  void operator()(const char* name, double& value) const {
    if (const c10::IValue* v = find(name)) {
      LT_CHECK_VALUE(v->isDouble() || v->isInt(), where, ".", name, " must be a number, got a ", v->tagKind());
      value = v->isDouble() ? v->toDouble() : static_cast<double>(v->toInt());
    }
  }
  void operator()(const char* name, bool& value) const {
    if (const c10::IValue* v = find(name)) {
      LT_CHECK_VALUE(v->isBool(), where, ".", name, " must be a bool, got a ", v->tagKind());
      value = v->toBool();
    }
  }
  void operator()(const char* name, int64_t& value) const {  // "step": an int, or PyTorch's float tensor
    if (const c10::IValue* v = find(name)) {
      LT_CHECK_VALUE(v->isInt() || (v->isTensor() && v->toTensor().numel() == 1), where, ".", name,
                     " must be an int or a one-element tensor, got a ", v->tagKind());
      value = v->isInt() ? v->toInt() : static_cast<int64_t>(v->toTensor().item<double>());
    }
  }
  void operator()(const char* name, Betas& value) const {
    if (const c10::IValue* v = find(name)) {
      const std::vector<c10::IValue> items = sequence(*v);
      LT_CHECK_VALUE(items.size() == 2 && items[0].isDouble() && items[1].isDouble(), where, ".", name,
                     " must be two floats, got ", *v);
      value = {items[0].toDouble(), items[1].toDouble()};
    }
  }
  void operator()(const char* name, torch::Tensor& value) const {
    const c10::IValue* v = find(name);
    if (v == nullptr) {
      // Only these are left out where unused (no momentum, no amsgrad, not centered).
      static const std::vector<std::string> kOptional = {"momentum_buffer", "max_exp_avg_sq", "grad_avg"};
      LT_CHECK_VALUE(std::find(kOptional.begin(), kOptional.end(), name) != kOptional.end(), where, " has no '", name,
                     "' (the state of another optimizer?)");
      value = torch::Tensor();
      return;
    }
    LT_CHECK_VALUE(v->isTensor(), where, ".", name, " must be a tensor, got a ", v->tagKind());
    // A sharded checkpoint's placeholder: kept as it is where it is neither copied nor cast (its reader
    // then copies the part it needs).
    const torch::Tensor& given = v->toTensor();
    const bool fits = given.device() == parameter->device() &&
                      (!given.is_floating_point() || given.scalar_type() == parameter->scalar_type());
    const torch::Tensor t = is_deferred(given) && (copy || !fits) ? materialized(given) : given;
    LT_CHECK_VALUE(t.sizes() == parameter->sizes(), where, ".", name, " has shape ", t.sizes(),
                   " but its parameter has shape ", parameter->sizes(), " (the state of another model?)");
    value = t.to(parameter->device(), t.is_floating_point() ? parameter->scalar_type() : t.scalar_type(),
                 /*non_blocking=*/false, copy);
  }
};

template <typename Options, typename State>
c10::IValue to_dict(Optimizer& optimizer) {
  c10::impl::GenericDict state(c10::IntType::get(), c10::AnyType::get());
  c10::impl::GenericList groups(c10::AnyType::get());
  int64_t index = 0;
  for (auto& group : optimizer.param_groups()) {
    StateDict g = new_state_dict();
    visit(static_cast<Options&>(group.options()), Put{g});
    c10::List<int64_t> params;
    for (const auto& p : group.params()) {
      auto it = optimizer.state().find(optimizer_state_key(p));
      if (it != optimizer.state().end()) {
        StateDict s = new_state_dict();
        visit(static_cast<State&>(*it->second), Put{s});
        state.insert(index, s);
      }
      params.push_back(index++);
    }
    g.insert("params", params);
    groups.push_back(g);
  }
  StateDict out = new_state_dict();
  out.insert("state", state);
  out.insert("param_groups", groups);
  return out;
}

template <typename Options, typename State>
void from_dict(Optimizer& optimizer, const c10::impl::GenericDict& dict, const std::string& where, bool copy) {
  LT_CHECK_VALUE(dict.contains("state") && dict.at("state").isGenericDict() && dict.contains("param_groups") &&
                     is_sequence(dict.at("param_groups")),
                 where, " holds no optimizer state dict ({\"state\": {...}, \"param_groups\": [...]})");
  const auto state = dict.at("state").toGenericDict();
  const std::vector<c10::IValue> groups = sequence(dict.at("param_groups"));
  LT_CHECK_VALUE(groups.size() == optimizer.param_groups().size(), where, " has ", groups.size(),
                 " parameter group(s), the optimizer ", optimizer.param_groups().size());
  // Everything is read and checked before the optimizer changes.
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
  std::vector<std::pair<OptimizerStateKey, std::unique_ptr<State>>> states;
  std::vector<OptimizerStateKey> stateless;
  int64_t index = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string at = c10::str(where, ".param_groups[", i, "]");
    const c10::IValue& group = groups[i];
    LT_CHECK_VALUE(group.isGenericDict(), at, " must be a dict, got a ", group.tagKind());
    const StateDict g = group.toGenericDict();
    LT_CHECK_VALUE(!g.contains("maximize") || !g.at("maximize").isBool() || !g.at("maximize").toBool(), at,
                   ".maximize is True: LibTorch's optimizers only minimize");
    auto& target = optimizer.param_groups()[i];
    auto opts = target.options().clone();
    visit(static_cast<Options&>(*opts), Get{g, at, nullptr});
    options.push_back(std::move(opts));
    LT_CHECK_VALUE(g.contains("params") && is_sequence(g.at("params")), at, " has no list of \"params\"");
    const std::vector<c10::IValue> params = sequence(g.at("params"));
    LT_CHECK_VALUE(params.size() == target.params().size(), at, " has ", params.size(), " parameters, the optimizer's ",
                   target.params().size(), " (the state of another model?)");
    for (size_t j = 0; j < params.size(); ++j, ++index) {
      const torch::Tensor& p = target.params()[j];
      const c10::IValue& id = params[j];
      auto it = id.isInt() ? state.find(id) : state.end();
      if (it == state.end()) {
        stateless.push_back(optimizer_state_key(p));
        continue;
      }
      const std::string entry = c10::str(where, ".state[", id, "]");
      LT_CHECK_VALUE(it->value().isGenericDict(), entry, " must be a dict, got a ", it->value().tagKind());
      const StateDict fields = it->value().toGenericDict();
      auto s = std::make_unique<State>();
      std::vector<std::string> names;
      visit(*s, Get{fields, entry, &p, &names, copy});
      for (const auto& field : fields) {
        const std::string name = field.key().isString() ? field.key().toStringRef() : c10::str(field.key());
        LT_CHECK_VALUE(std::find(names.begin(), names.end(), name) != names.end(), entry, " has '", name,
                       "', which this optimizer's state does not name (valid: ", c10::Join(", ", names),
                       "; the state of another optimizer?)");
      }
      states.emplace_back(optimizer_state_key(p), std::move(s));
    }
  }
  for (size_t i = 0; i < options.size(); ++i) optimizer.param_groups()[i].set_options(std::move(options[i]));
  for (const auto& key : stateless) optimizer.state().erase(key);
  for (auto& [key, s] : states) optimizer.state()[key] = std::move(s);
}

// Runs Step::run<Options, State> for the optimizer's type; false for one not listed.
template <typename Step, typename... Args>
bool with_known_type(Optimizer& optimizer, Args&&... args) {
  namespace o = torch::optim;
  if (dynamic_cast<o::SGD*>(&optimizer)) return Step::template run<o::SGDOptions, o::SGDParamState>(optimizer, args...);
  if (dynamic_cast<o::Adam*>(&optimizer)) return Step::template run<o::AdamOptions, o::AdamParamState>(optimizer, args...);
  if (dynamic_cast<o::AdamW*>(&optimizer)) {
    return Step::template run<o::AdamWOptions, o::AdamWParamState>(optimizer, args...);
  }
  if (dynamic_cast<o::RMSprop*>(&optimizer)) {
    return Step::template run<o::RMSpropOptions, o::RMSpropParamState>(optimizer, args...);
  }
  if (dynamic_cast<o::Adagrad*>(&optimizer)) {
    return Step::template run<o::AdagradOptions, o::AdagradParamState>(optimizer, args...);
  }
  return false;
}

struct Dump {
  template <typename Options, typename State>
  static bool run(Optimizer& optimizer, c10::IValue& out) {
    out = to_dict<Options, State>(optimizer);
    return true;
  }
};
struct Load {
  template <typename Options, typename State>
  static bool run(Optimizer& optimizer, const c10::impl::GenericDict& dict, const std::string& where, bool copy) {
    from_dict<Options, State>(optimizer, dict, where, copy);
    return true;
  }
};

}  // namespace

c10::IValue optimizer_state_dict(Optimizer& optimizer) {
  c10::IValue out;
  if (with_known_type<Dump>(optimizer, out)) return out;
  return optimizer_to_bytes(optimizer);
}

void load_optimizer_state_dict(Optimizer& optimizer, const c10::IValue& state, const std::string& where, bool copy) {
  if (state.isTensor()) return optimizer_from_bytes(optimizer, state.toTensor());  // LibTorch's archive
  LT_CHECK_VALUE(state.isGenericDict(), where, " must be an optimizer state dict or LibTorch's archive bytes, got a ",
                 state.tagKind());
  LT_CHECK_VALUE(with_known_type<Load>(optimizer, state.toGenericDict(), where, copy), where,
                 " is PyTorch's layout, which lightning-cpp reads for SGD, Adam, AdamW, RMSprop and Adagrad; "
                 "this optimizer is none of them");
}

torch::Tensor optimizer_to_bytes(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream os;
  archive.save_to(os);
  const std::string s = os.str();
  return torch::from_blob(const_cast<char*>(s.data()), {static_cast<int64_t>(s.size())}, torch::kUInt8).clone();
}

void optimizer_from_bytes(torch::optim::Optimizer& optimizer, const torch::Tensor& bytes) {
  const auto contiguous = bytes.contiguous();
  std::istringstream is(std::string(static_cast<const char*>(contiguous.data_ptr()), contiguous.numel()));
  torch::serialize::InputArchive archive;
  archive.load_from(is);
  optimizer.load(archive);
}

}  // namespace lt
