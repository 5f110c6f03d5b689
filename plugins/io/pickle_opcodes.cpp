#include <lightning_cpp/plugins/io/pickle_opcodes.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace lt::detail {

namespace {

// The little-endian length of `n` bytes at `p`.
uint64_t length_at(const std::string& pickle, size_t p, size_t n) {
  uint64_t value = 0;
  for (size_t i = 0; i < n; ++i) value |= static_cast<uint64_t>(static_cast<unsigned char>(pickle[p + i])) << (8 * i);
  return value;
}

// The bytes the opcode at `p` takes after itself, or -1 for one we do not know (pickletools' table).
int64_t argument_size(const std::string& pickle, size_t p) {
  const size_t at = p + 1;
  const auto line_end = [&](size_t from) -> int64_t {
    const size_t end = pickle.find('\n', from);
    return end == std::string::npos ? -1 : static_cast<int64_t>(end + 1 - at);
  };
  switch (pickle[p]) {
    // No argument.
    case '(': case '.': case '0': case '1': case '2': case 'N': case '\x88': case '\x89': case '}': case ']':
    case ')': case 't': case '\x85': case '\x86': case '\x87': case 'a': case 'e': case 's': case 'u': case 'b':
    case 'R': case '\x81': case 'l': case 'd': case 'Q': case '\x8f': case '\x90': case '\x91': case '\x92':
    case '\x93': case '\x94':
      return 0;
    case 'K': case 'q': case 'h': case '\x80':
      return 1;
    case 'M':
      return 2;
    case 'J': case 'r': case 'j':
      return 4;
    case 'G': case '\x95':
      return 8;
    // A length, then as many bytes.
    case 'U': case 'C': case '\x8c': case '\x8a':
      return at < pickle.size() ? 1 + static_cast<int64_t>(length_at(pickle, at, 1)) : -1;
    case 'X': case 'T': case 'B': case '\x8b':
      return at + 4 <= pickle.size() ? 4 + static_cast<int64_t>(length_at(pickle, at, 4)) : -1;
    case '\x8d': case '\x8e':
      return at + 8 <= pickle.size() ? 8 + static_cast<int64_t>(length_at(pickle, at, 8)) : -1;
    // Up to a newline; GLOBAL and INST: two lines.
    case 'I': case 'L': case 'S': case 'V': case 'F': case 'p': case 'g': case 'P':
      return line_end(at);
    case 'c': case 'i': {
      const int64_t first = line_end(at);
      return first < 0 ? -1 : line_end(at + static_cast<size_t>(first));  // both lines, from `at`
    }
    default:
      return -1;
  }
}

}  // namespace

namespace {

// What a stack entry is, as far as the rewrites care.
enum class Item { kMark, kOrderedDictClass, kEmptyTuple, kOther };
struct Entry {
  Item item;
  size_t start;  // where the opcodes that made it begin
};

// An edit of the input: bytes [begin, end) replaced by `with` (begin == end: an insertion).
struct Edit {
  size_t begin, end;
  std::string with;
};

}  // namespace

bool adapt_python_pickle(std::string& pickle) {
  static const std::string kOrderedDict = "collections\nOrderedDict\n";
  std::vector<Entry> stack;
  std::vector<Edit> edits;
  std::unordered_set<uint64_t> class_memo;  // memo slots that hold the OrderedDict class
  const auto pop_to_mark = [&]() -> std::optional<size_t> {  // the mark's start
    while (!stack.empty() && stack.back().item != Item::kMark) stack.pop_back();
    if (stack.empty()) return std::nullopt;
    const size_t start = stack.back().start;
    stack.pop_back();
    return start;
  };
  const auto pop = [&](size_t n) -> std::optional<size_t> {  // the first popped one's start
    if (stack.size() < n) return std::nullopt;
    const size_t start = stack[stack.size() - n].start;
    stack.resize(stack.size() - n);
    return start;
  };
  bool stopped = false;
  for (size_t p = 0; p < pickle.size() && !stopped;) {
    const char op = pickle[p];
    const int64_t size = argument_size(pickle, p);
    if (size < 0 || p + 1 + static_cast<size_t>(size) > pickle.size()) return false;
    std::optional<size_t> start = p;
    switch (op) {
      case '.': stopped = true; break;                 // STOP
      case '\x80': case 'q': case 'r': break;          // PROTO; BINPUT, LONG_BINPUT (below)
      case '(': stack.push_back({Item::kMark, p}); break;
      case 'c':  // GLOBAL
        stack.push_back({pickle.compare(p + 1, kOrderedDict.size(), kOrderedDict) == 0 ? Item::kOrderedDictClass
                                                                                      : Item::kOther, p});
        break;
      case 'h': case 'j':  // BINGET, LONG_BINGET
        stack.push_back({class_memo.count(length_at(pickle, p + 1, op == 'h' ? 1 : 4)) != 0 ? Item::kOrderedDictClass
                                                                                            : Item::kOther, p});
        break;
      case ')': stack.push_back({Item::kEmptyTuple, p}); break;
      // One value pushed.
      case 'N': case '\x88': case '\x89': case 'K': case 'M': case 'J': case '\x8a': case '\x8b': case 'X':
      case '\x8c': case 'G': case '}': case ']': case 'U': case 'C': case 'T': case 'B': case 'I': case 'L':
      case 'S': case 'V': case 'F': case 'g':
        stack.push_back({Item::kOther, p});
        break;
      case 't': case 'l': case 'd':  // TUPLE, LIST, DICT: from the mark
        start = pop_to_mark();
        if (start) stack.push_back({Item::kOther, *start});
        break;
      case '\x85': case '\x86': case '\x87':  // TUPLE1..3
        start = pop(static_cast<size_t>(op - '\x85' + 1));
        if (start) stack.push_back({Item::kOther, *start});
        break;
      case 'Q':  // BINPERSID: one for one
        start = pop(1);
        if (start) stack.push_back({Item::kOther, *start});
        break;
      case 'a': start = pop(1); break;                 // APPEND
      case 's': start = pop(2); break;                 // SETITEM
      case 'e': case 'u': start = pop_to_mark(); break;  // APPENDS, SETITEMS
      case 'R': case 'b': case '\x81': {  // REDUCE, BUILD, NEWOBJ: two for one
        if (stack.size() < 2) return false;
        const Entry callable = stack[stack.size() - 2], argument = stack.back();
        if (op == 'R' && callable.item == Item::kOrderedDictClass && argument.item == Item::kEmptyTuple) {
          edits.push_back({callable.start, p + 1, "}"});  // OrderedDict() -> EMPTY_DICT
        } else if (op == 'b') {  // obj, state -> obj[kBuildStateKey] = state: MARK, key, state, SETITEMS
          const std::string key = kBuildStateKey;  // (LibTorch 1.13's unpickler has no SETITEM)
          std::string unicode = "(X";
          for (size_t i = 0; i < 4; ++i) unicode += static_cast<char>((key.size() >> (8 * i)) & 0xff);
          edits.push_back({argument.start, argument.start, unicode + key});
          edits.push_back({p, p + 1, "u"});
        }
        stack.resize(stack.size() - 2);
        stack.push_back({Item::kOther, callable.start});
        break;
      }
      default:
        return false;  // not protocol 2's
    }
    if (!start) return false;  // a pop past the stack's bottom: not a pickle we follow
    if ((op == 'q' || op == 'r') && !stack.empty() && stack.back().item == Item::kOrderedDictClass) {
      class_memo.insert(length_at(pickle, p + 1, op == 'q' ? 1 : 4));
    }
    p += 1 + static_cast<size_t>(size);
  }
  if (edits.empty()) return false;
  std::sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;  // an insertion before a replacement there
  });
  std::string out;
  out.reserve(pickle.size() + 64 * edits.size());
  size_t at = 0;
  for (const Edit& edit : edits) {
    if (edit.begin < at) return false;  // overlapping: left as it is
    out.append(pickle, at, edit.begin - at);
    out += edit.with;
    at = edit.end;
  }
  out.append(pickle, at, std::string::npos);
  pickle.swap(out);
  return true;
}

void drop_build_states(const c10::IValue& value) {
  if (value.isGenericDict()) {
    c10::impl::GenericDict dict = value.toGenericDict();
    static_cast<void>(dict.erase(kBuildStateKey));
    for (const auto& entry : dict) drop_build_states(entry.value());
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) drop_build_states(item);
  } else if (value.isTuple()) {
    for (const c10::IValue& item : value.toTupleRef().elements()) drop_build_states(item);
  }
}

}  // namespace lt::detail
