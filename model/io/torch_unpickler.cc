#include "model/io/torch_unpickler.h"

#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/io/little_endian.h"
#include "model/io/load_error.h"
#include "model/io/view_bounds.h"

namespace srformer {
namespace {

// Limits far above what any state dict needs, so that a damaged file fails instead of eating memory.
// A state dict needs about a dozen objects per tensor: two million allow 100,000s of tensors.
constexpr size_t kMaxObjects = size_t{1} << 21;
constexpr size_t kMaxStack = size_t{1} << 20;
constexpr size_t kMaxMemo = size_t{1} << 21;
constexpr size_t kMaxMarks = 1024;
constexpr size_t kMaxDims = 64;
constexpr size_t kMaxGlobalName = 256;
constexpr int kHighestProtocol = 5;

enum class Kind { kNone, kBool, kInt, kFloat, kStr, kTuple, kList, kDict, kGlobal, kStorage, kTensor };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kStr:
      return "str";
    case Kind::kTuple:
      return "tuple";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kGlobal:
      return "global";
    case Kind::kStorage:
      return "storage";
    case Kind::kTensor:
      return "tensor";
  }
  return "?";
}

// The globals a state dict may name; none of them is ever run, each is interpreted here.
enum class Global {
  kOrderedDict,
  kRebuildTensorV2,
  kRebuildParameter,
  kRebuildParameterWithState,
  kRestoreTypeTag,
  kStorageClass
};

// One Python object. All are owned by the unpickler's arena and referred to by plain pointers, so that a
// pickle making a container hold itself (through the memo) cannot leak or recurse.
struct Object {
  Kind kind = Kind::kNone;
  int64_t integer = 0;  // kBool, kInt; kTensor: storage offset
  double real = 0;
  std::string text;              // kStr; kGlobal: qualified name
  std::vector<Object*> items;    // kTuple, kList; kDict: key, value, key, value, ...
  Global global{};               // kGlobal
  torch::ScalarType dtype{};     // kGlobal (storage class), kStorage
  uint64_t numel = 0;            // kStorage
  torch::Tensor storage;         // kStorage: 1-D, all of its bytes
  Object* base = nullptr;        // kTensor: its kStorage
  std::vector<int64_t> sizes;    // kTensor
  std::vector<int64_t> strides;  // kTensor
};

std::optional<torch::ScalarType> storage_dtype(const std::string& name) {
  static const std::unordered_map<std::string, torch::ScalarType> dtypes = {
      {"FloatStorage", torch::kFloat},       {"DoubleStorage", torch::kDouble}, {"HalfStorage", torch::kHalf},
      {"BFloat16Storage", torch::kBFloat16}, {"LongStorage", torch::kLong},     {"IntStorage", torch::kInt},
      {"ShortStorage", torch::kShort},       {"CharStorage", torch::kChar},     {"ByteStorage", torch::kByte},
      {"BoolStorage", torch::kBool}};
  const auto it = dtypes.find(name);
  if (it == dtypes.end()) return std::nullopt;
  return it->second;
}

class Unpickler {
 public:
  Unpickler(std::string_view pickle, const TorchStorageLoader& load_storage)
      : data_(pickle), load_storage_(load_storage) {}

  std::map<std::string, torch::Tensor> run() { return state_dict(unpickle()); }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw LoadError("data.pkl byte " + std::to_string(op_at_) + ": " + what);
  }

  std::string_view take(uint64_t n) {
    if (n > data_.size() - pos_) fail("the pickle ends inside its opcode (truncated)");
    const std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  uint64_t read_le(size_t n) { return read_little_endian(take(n).data(), n); }
  std::string read_line() {
    const std::string_view rest = data_.substr(pos_, kMaxGlobalName + 1);
    const size_t end = rest.find('\n');
    if (end == std::string_view::npos)
      fail("a GLOBAL name is not terminated within " + std::to_string(kMaxGlobalName) + " bytes");
    pos_ += end + 1;
    return std::string(rest.substr(0, end));
  }
  // A two's-complement little-endian integer of `n` bytes (LONG1, LONG4).
  int64_t read_long(uint64_t n) {
    if (n > 8) fail("an integer of " + std::to_string(n) + " bytes is too large");
    if (n == 0) return 0;
    uint64_t value = read_le(n);
    if (n < 8 && ((value >> (8 * n - 1)) & 1) != 0) value |= ~uint64_t{0} << (8 * n);
    return static_cast<int64_t>(value);
  }

  Object* make(Kind kind) {
    if (arena_.size() >= kMaxObjects) fail("the pickle makes more than " + std::to_string(kMaxObjects) + " objects");
    Object& o = arena_.emplace_back();
    o.kind = kind;
    return &o;
  }
  Object* make_int(Kind kind, int64_t value) {
    Object* o = make(kind);
    o->integer = value;
    return o;
  }
  Object* make_str(std::string_view text) {
    Object* o = make(Kind::kStr);
    o->text = text;
    return o;
  }
  Object* make_seq(Kind kind, std::vector<Object*> items) {
    Object* o = make(kind);
    o->items = std::move(items);
    return o;
  }

  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Object* o) {
    if (stack_.size() >= kMaxStack) fail("the stack grows past " + std::to_string(kMaxStack) + " entries");
    stack_.push_back(o);
  }
  Object* top() const {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  Object* pop() {
    Object* o = top();
    stack_.pop_back();
    return o;
  }
  std::vector<Object*> pop_mark() {
    if (marks_.empty()) fail("no MARK to collect items up to");
    const size_t at = marks_.back();
    marks_.pop_back();
    std::vector<Object*> items(stack_.begin() + static_cast<std::ptrdiff_t>(at), stack_.end());
    stack_.resize(at);
    return items;
  }
  Object* expect(Object* o, Kind kind, const char* what) const {
    if (o->kind != kind) fail(std::string(what) + " must be a " + kind_name(kind) + ", not a " + kind_name(o->kind));
    return o;
  }
  void memo_put(uint64_t index) {
    Object* const o = top();
    if (memo_.size() >= kMaxMemo && memo_.count(index) == 0) {
      fail("the memo grows past " + std::to_string(kMaxMemo) + " entries");
    }
    memo_[index] = o;
  }
  void memo_get(uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " was never stored");
    push(it->second);
  }

  Object* global(const std::string& module, const std::string& name) {
    Object* o = make(Kind::kGlobal);
    o->text = module + "." + name;
    if (module == "collections" && name == "OrderedDict") {
      o->global = Global::kOrderedDict;
    } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      o->global = Global::kRebuildTensorV2;
    } else if (module == "torch._utils" && name == "_rebuild_parameter") {
      o->global = Global::kRebuildParameter;
    } else if (module == "torch._utils" && name == "_rebuild_parameter_with_state") {
      o->global = Global::kRebuildParameterWithState;
    } else if (module == "torch.jit._pickle" && name == "restore_type_tag") {  // LibTorch's pickle_save
      o->global = Global::kRestoreTypeTag;
    } else if (const auto dtype = module == "torch" ? storage_dtype(name) : std::nullopt) {
      o->global = Global::kStorageClass;
      o->dtype = *dtype;
    } else {
      fail("refuses the global '" + o->text + "': a state dict holds only tensors, and nothing in the file is run");
    }
    return o;
  }

  // ('storage', storage class, key, location, numel), as torch.save's persistent_id writes it.
  Object* persistent_load(Object* pid) {
    expect(pid, Kind::kTuple, "a persistent id");
    const auto& f = pid->items;
    if (f.size() != 5 || f[0]->kind != Kind::kStr || f[0]->text != "storage") {
      fail("a persistent id must be ('storage', type, key, location, numel)");
    }
    if (f[1]->kind != Kind::kGlobal || f[1]->global != Global::kStorageClass) {
      fail("a persistent id's storage type must be a torch storage class");
    }
    const std::string& key = expect(f[2], Kind::kStr, "a storage key")->text;
    expect(f[3], Kind::kStr, "a storage location");
    const int64_t numel = expect(f[4], Kind::kInt, "a storage size")->integer;
    if (numel < 0) fail("storage '" + key + "' has a negative size");
    const auto [it, fresh] = storages_.try_emplace(key, nullptr);
    if (!fresh) {
      // Tied weights: several tensors view one storage, which must be declared alike each time.
      if (it->second->dtype != f[1]->dtype || it->second->numel != static_cast<uint64_t>(numel)) {
        fail("storage '" + key + "' is declared twice with different types or sizes");
      }
      return it->second;
    }
    Object* s = make(Kind::kStorage);
    s->dtype = f[1]->dtype;
    s->numel = static_cast<uint64_t>(numel);
    s->storage = load_storage_(key, s->dtype, s->numel);
    it->second = s;
    return s;
  }

  std::vector<int64_t> int_tuple(Object* o, const char* what) const {
    expect(o, Kind::kTuple, what);
    if (o->items.size() > kMaxDims)
      fail(std::string(what) + " has more than " + std::to_string(kMaxDims) + " dimensions");
    std::vector<int64_t> out;
    for (Object* item : o->items) out.push_back(expect(item, Kind::kInt, what)->integer);
    return out;
  }

  Object* reduce(Object* callable, Object* args_tuple) {
    expect(callable, Kind::kGlobal, "what REDUCE calls");
    const auto& args = expect(args_tuple, Kind::kTuple, "REDUCE's arguments")->items;
    const auto arity = [&](size_t low, size_t high) {
      if (args.size() < low || args.size() > high) {
        fail(callable->text + " takes " + std::to_string(low) + (low == high ? "" : " to " + std::to_string(high)) +
             " arguments, not " + std::to_string(args.size()));
      }
    };
    switch (callable->global) {
      case Global::kOrderedDict:
        arity(0, 0);
        return make(Kind::kDict);
      case Global::kRestoreTypeTag:  // (value, type annotation): the value
        arity(2, 2);
        expect(args[1], Kind::kStr, "a type tag");
        return args[0];
      case Global::kRebuildParameter:  // (tensor, requires_grad, backward_hooks): the tensor
        arity(3, 3);
        return expect(args[0], Kind::kTensor, "a parameter's data");
      case Global::kRebuildParameterWithState:  // (tensor, requires_grad, backward_hooks, state)
        arity(4, 4);
        return expect(args[0], Kind::kTensor, "a parameter's data");
      case Global::kRebuildTensorV2: {
        // (storage, storage_offset, sizes, strides, requires_grad, backward_hooks[, metadata])
        arity(6, 7);
        Object* t = make(Kind::kTensor);
        t->base = expect(args[0], Kind::kStorage, "a tensor's storage");
        t->integer = expect(args[1], Kind::kInt, "a tensor's storage offset")->integer;
        t->sizes = int_tuple(args[2], "a tensor's size");
        t->strides = int_tuple(args[3], "a tensor's stride");
        if (t->sizes.size() != t->strides.size())
          fail("a tensor has " + std::to_string(t->sizes.size()) + " sizes but " + std::to_string(t->strides.size()) +
               " strides");
        expect(args[4], Kind::kBool, "requires_grad");
        expect(args[5], Kind::kDict, "backward_hooks");
        return t;
      }
      case Global::kStorageClass:
        break;
    }
    fail(callable->text + " is a storage type marker, not something to call");
  }

  // Runs the opcodes up to STOP and returns what it leaves.
  Object* unpickle() {
    while (true) {
      op_at_ = pos_;
      if (pos_ >= data_.size()) fail("the pickle ends before its STOP opcode (truncated)");
      const auto op = static_cast<unsigned char>(data_[pos_++]);
      switch (op) {
        case 0x80: {  // PROTO
          const auto version = read_le(1);
          if (version > kHighestProtocol) fail("pickle protocol " + std::to_string(version) + " is newer than 5");
          break;
        }
        case 0x95:  // FRAME: a length hint only
          if (read_le(8) > data_.size() - pos_) fail("a frame runs past the end of the pickle (truncated)");
          break;
        case '.':  // STOP
          return pop();
        case '(':  // MARK
          if (marks_.size() >= kMaxMarks) fail("nesting deeper than " + std::to_string(kMaxMarks) + " MARKs");
          marks_.push_back(stack_.size());
          break;
        case '}':  // EMPTY_DICT
          push(make(Kind::kDict));
          break;
        case ']':  // EMPTY_LIST
          push(make(Kind::kList));
          break;
        case ')':  // EMPTY_TUPLE
          push(make(Kind::kTuple));
          break;
        case 't':  // TUPLE
          push(make_seq(Kind::kTuple, pop_mark()));
          break;
        case 0x85:    // TUPLE1
        case 0x86:    // TUPLE2
        case 0x87: {  // TUPLE3
          std::vector<Object*> items(op - 0x84);
          for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
          push(make_seq(Kind::kTuple, std::move(items)));
          break;
        }
        case 'J':  // BININT
          push(make_int(Kind::kInt, static_cast<int32_t>(read_le(4))));
          break;
        case 'K':  // BININT1
          push(make_int(Kind::kInt, static_cast<int64_t>(read_le(1))));
          break;
        case 'M':  // BININT2
          push(make_int(Kind::kInt, static_cast<int64_t>(read_le(2))));
          break;
        case 0x8a:  // LONG1
          push(make_int(Kind::kInt, read_long(read_le(1))));
          break;
        case 0x8b:  // LONG4
          push(make_int(Kind::kInt, read_long(read_le(4))));
          break;
        case 'N':  // NONE
          push(make(Kind::kNone));
          break;
        case 0x88:  // NEWTRUE
        case 0x89:  // NEWFALSE
          push(make_int(Kind::kBool, op == 0x88 ? 1 : 0));
          break;
        case 'G': {  // BINFLOAT, big-endian
          const std::string_view bytes = take(8);
          uint64_t bits = 0;
          for (const char c : bytes) bits = bits << 8 | static_cast<unsigned char>(c);
          Object* o = make(Kind::kFloat);
          std::memcpy(&o->real, &bits, sizeof bits);
          push(o);
          break;
        }
        case 0x8c:  // SHORT_BINUNICODE
        case 'U':   // SHORT_BINSTRING
          push(make_str(take(read_le(1))));
          break;
        case 'X':  // BINUNICODE
          push(make_str(take(read_le(4))));
          break;
        case 0x8d:  // BINUNICODE8
          push(make_str(take(read_le(8))));
          break;
        case 'T': {  // BINSTRING: a signed length
          const auto length = static_cast<int32_t>(read_le(4));
          if (length < 0) fail("a string has a negative length");
          push(make_str(take(static_cast<uint64_t>(length))));
          break;
        }
        case 'c': {  // GLOBAL
          std::string module = read_line();
          push(global(module, read_line()));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const std::string name = expect(pop(), Kind::kStr, "a global's name")->text;
          const std::string module = expect(pop(), Kind::kStr, "a global's module")->text;
          push(global(module, name));
          break;
        }
        case 'Q':  // BINPERSID
          push(persistent_load(pop()));
          break;
        case 'R': {  // REDUCE
          Object* args = pop();
          Object* callable = pop();
          push(reduce(callable, args));
          break;
        }
        case 'b': {  // BUILD: torch.save sets an OrderedDict's _metadata, which only Python uses
          pop();     // the state
          if (top()->kind != Kind::kDict) fail(std::string("BUILD sets the state of a ") + kind_name(top()->kind));
          break;
        }
        case 's': {  // SETITEM
          Object* value = pop();
          Object* key = pop();
          auto& items = expect(top(), Kind::kDict, "what SETITEM fills")->items;
          items.push_back(key);
          items.push_back(value);
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<Object*> pairs = pop_mark();
          if (pairs.size() % 2 != 0) fail("SETITEMS has a key without a value");
          auto& items = expect(top(), Kind::kDict, "what SETITEMS fills")->items;
          items.insert(items.end(), pairs.begin(), pairs.end());
          break;
        }
        case 'a': {  // APPEND
          Object* value = pop();
          expect(top(), Kind::kList, "what APPEND fills")->items.push_back(value);
          break;
        }
        case 'e': {  // APPENDS
          std::vector<Object*> values = pop_mark();
          auto& items = expect(top(), Kind::kList, "what APPENDS fills")->items;
          items.insert(items.end(), values.begin(), values.end());
          break;
        }
        case 'q':  // BINPUT
          memo_put(read_le(1));
          break;
        case 'r':  // LONG_BINPUT
          memo_put(read_le(4));
          break;
        case 0x94:  // MEMOIZE
          memo_put(memo_.size());
          break;
        case 'h':  // BINGET
          memo_get(read_le(1));
          break;
        case 'j':  // LONG_BINGET
          memo_get(read_le(4));
          break;
        default: {
          static const char* const kHex = "0123456789abcdef";
          fail(std::string("opcode 0x") + kHex[op >> 4] + kHex[op & 15] +
               " is not one a torch.save state dict uses (a damaged file, or not a state dict)");
        }
      }
    }
  }

  [[noreturn]] void fail_dict(const std::string& what) const { throw LoadError("data.pkl: " + what); }

  torch::Tensor tensor(const std::string& name, const Object& t) const {
    const Object& s = *t.base;
    const auto element_size = static_cast<uint64_t>(c10::elementSize(s.dtype));
    if (const auto problem =
            view_outside_bytes(t.integer, t.sizes, t.strides, element_size, s.storage.storage().nbytes());
        !problem.empty()) {
      fail_dict("tensor '" + name + "' " + problem + " (a damaged file)");
    }
    unsigned __int128 numel = 1;
    for (const int64_t size : t.sizes) {
      numel *= static_cast<uint64_t>(size);
      if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail_dict("tensor '" + name + "' has more elements than fit 64 bits (a damaged file)");
      }
      if (numel == 0) break;
    }
    return torch::empty({0}, s.storage.options()).set_(s.storage.storage(), t.integer, t.sizes, t.strides);
  }

  std::map<std::string, torch::Tensor> state_dict(const Object* root) const {
    if (root->kind != Kind::kDict)
      fail_dict(std::string("expected a {name: tensor} dict, got a ") + kind_name(root->kind));
    std::map<std::string, torch::Tensor> out;
    for (size_t i = 0; i + 1 < root->items.size(); i += 2) {
      const Object& key = *root->items[i];
      const Object& value = *root->items[i + 1];
      if (key.kind != Kind::kStr || value.kind != Kind::kTensor) {
        fail_dict(std::string("expected a {name: tensor} dict, found an entry of kind ") + kind_name(key.kind) +
                  " -> " + kind_name(value.kind));
      }
      out[key.text] = tensor(key.text, value);  // a repeated key: the last wins, as in Python
    }
    return out;
  }

  std::string_view data_;
  size_t pos_ = 0;
  size_t op_at_ = 0;  // where the opcode being run starts, for messages
  const TorchStorageLoader& load_storage_;
  std::deque<Object> arena_;
  std::vector<Object*> stack_;
  std::vector<size_t> marks_;  // stack sizes at each open MARK
  std::unordered_map<uint64_t, Object*> memo_;
  std::unordered_map<std::string, Object*> storages_;  // by key
};

}  // namespace

std::map<std::string, torch::Tensor> unpickle_state_dict(std::string_view pickle,
                                                         const TorchStorageLoader& load_storage) {
  return Unpickler(pickle, load_storage).run();
}

}  // namespace srformer
