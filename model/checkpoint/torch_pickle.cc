#include "model/checkpoint/torch_pickle.h"

#include <cstring>
#include <memory>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/util/status_macros.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "torch.save storages are read as little-endian");

namespace dserve {
namespace {

// ------------------------------------------------------------------ values --

struct Value;
using Ref = std::shared_ptr<Value>;

enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kTuple, kList, kDict, kGlobal, kStorage, kTensor, kObject };

struct Value {
  Kind kind = Kind::kNone;
  int64_t i = 0;             // kBool, kInt
  bool big = false;          // kInt: did not fit in int64 (`s` holds its little-endian bytes)
  double f = 0;              // kFloat
  std::string s;             // kString, kBytes, kGlobal ("module.name"), kObject (its callable), kStorage (key)
  std::vector<Ref> items;    // kTuple, kList; kDict: key, value, key, value, ...
  std::unordered_map<std::string, size_t> keys;  // kDict: string key -> its index in `items`
  // kStorage
  DType dtype = DType::kF32;
  int64_t numel = 0;
  int64_t view_offset = 0;   // legacy storage views
  // kTensor
  PickledTensor tensor;

  Value() = default;
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  // Iterative: a pickle can nest lists a million deep (by appending each to
  // the last), which a recursive destructor would overflow the stack with.
  ~Value() {
    std::vector<Ref> pending = std::move(items);
    while (!pending.empty()) {
      Ref v = std::move(pending.back());
      pending.pop_back();
      if (v != nullptr && v.use_count() == 1) {
        for (Ref& child : v->items) pending.push_back(std::move(child));
        v->items.clear();
      }
    }
  }
};

constexpr size_t kMaxMemo = 1u << 24;

Ref Make(Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "a bool";
    case Kind::kInt: return "an int";
    case Kind::kFloat: return "a float";
    case Kind::kString: return "a string";
    case Kind::kBytes: return "bytes";
    case Kind::kTuple: return "a tuple";
    case Kind::kList: return "a list";
    case Kind::kDict: return "a dict";
    case Kind::kGlobal: return "a class or function";
    case Kind::kStorage: return "a storage";
    case Kind::kTensor: return "a tensor";
    case Kind::kObject: return "an object";
  }
  return "?";
}

std::string Describe(const Value& v) {
  if (v.kind == Kind::kObject) return absl::StrCat("an object made by ", v.s);
  if (v.kind == Kind::kGlobal) return absl::StrCat("the global ", v.s);
  return KindName(v.kind);
}

struct StorageType {
  const char* name;
  DType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", DType::kF32}, {"DoubleStorage", DType::kF64}, {"HalfStorage", DType::kF16},
    {"BFloat16Storage", DType::kBF16}, {"LongStorage", DType::kI64}, {"IntStorage", DType::kI32},
    {"ShortStorage", DType::kI16}, {"CharStorage", DType::kI8}, {"ByteStorage", DType::kU8},
    {"BoolStorage", DType::kBool},
};

// "torch.FloatStorage" (also torch.cuda.FloatStorage, as old CUDA saves name it).
bool StorageDType(const std::string& global, DType* dtype) {
  std::string_view name = global;
  for (std::string_view prefix : {"torch.cuda.", "torch."}) {
    if (name.substr(0, prefix.size()) == prefix) {
      name.remove_prefix(prefix.size());
      break;
    }
  }
  for (const StorageType& t : kStorageTypes) {
    if (name == t.name) {
      *dtype = t.dtype;
      return true;
    }
  }
  return false;
}

// ----------------------------------------------------------------- machine --

class Machine {
 public:
  explicit Machine(std::string_view data) : data_(data) {}

  // Runs to STOP; the result is the one value left.
  absl::StatusOr<Ref> Run(size_t* consumed);
  const std::map<std::string, PickledStorage>& storages() const { return storages_; }

 private:
  absl::Status Step(uint8_t op, bool* stop);
  absl::Status Corrupt(const std::string& what) const {
    return absl::DataLossError(absl::StrCat("not a valid pickle: ", what, " (at byte ", op_at_, ")"));
  }
  absl::Status Read(size_t n, std::string_view* out) {
    if (data_.size() - pos_ < n) return Corrupt(absl::StrCat("needs ", n, " more bytes; file truncated?"));
    *out = data_.substr(pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status ReadLe(T* out) {
    std::string_view bytes;
    RETURN_IF_ERROR(Read(sizeof(T), &bytes));
    std::memcpy(out, bytes.data(), sizeof(T));
    return absl::OkStatus();
  }
  absl::Status ReadLine(std::string_view* out) {
    size_t end = data_.find('\n', pos_);
    if (end == std::string_view::npos) return Corrupt("unterminated line; file truncated?");
    *out = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return absl::OkStatus();
  }
  absl::Status Pop(Ref* out) {
    if (stack_.size() <= Floor()) return Corrupt("stack underflow");
    *out = std::move(stack_.back());
    stack_.pop_back();
    return absl::OkStatus();
  }
  absl::Status Top(Ref* out) {
    if (stack_.size() <= Floor()) return Corrupt("stack underflow");
    *out = stack_.back();
    return absl::OkStatus();
  }
  size_t Floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // The items since the last MARK, which is dropped.
  absl::Status PopMark(std::vector<Ref>* out) {
    if (marks_.empty()) return Corrupt("no MARK");
    const size_t mark = marks_.back();
    marks_.pop_back();
    out->assign(std::make_move_iterator(stack_.begin() + mark), std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return absl::OkStatus();
  }
  absl::Status Push(Ref v) {
    if (stack_.size() > (1u << 24)) return Corrupt("stack too deep");
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }
  absl::Status PushContainer(Kind kind, std::vector<Ref> items) {
    Ref v = Make(kind);
    v->items = std::move(items);
    return Push(std::move(v));
  }
  absl::Status Memo(uint32_t index) {
    if (memo_.size() >= kMaxMemo && !memo_.count(index)) return Corrupt("memo too large");
    Ref top;
    RETURN_IF_ERROR(Top(&top));
    memo_[index] = top;
    return absl::OkStatus();
  }
  absl::Status Get(uint32_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return Corrupt(absl::StrCat("memo entry ", index, " used before it was set"));
    return Push(it->second);
  }
  absl::Status PushString(Kind kind, size_t n) {
    std::string_view bytes;
    RETURN_IF_ERROR(Read(n, &bytes));
    Ref v = Make(kind);
    v->s.assign(bytes);
    return Push(std::move(v));
  }
  absl::Status PushInt(int64_t i) {
    Ref v = Make(Kind::kInt);
    v->i = i;
    return Push(std::move(v));
  }
  absl::Status PushLong(size_t n);
  absl::Status Append(const Ref& list, std::vector<Ref> items);
  absl::Status SetItems(const Ref& dict, std::vector<Ref> items);
  absl::Status Reduce(const Ref& callable, const Ref& args);
  absl::Status PersistentId(const Ref& pid);
  absl::StatusOr<Ref> RebuildTensor(const std::vector<Ref>& args);

  std::string_view data_;
  size_t pos_ = 0;
  size_t op_at_ = 0;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, Ref> memo_;
  uint32_t next_memo_ = 0;  // MEMOIZE
  std::map<std::string, PickledStorage> storages_;
};

absl::StatusOr<Ref> Machine::Run(size_t* consumed) {
  if (data_.empty()) return Corrupt("empty");
  bool stop = false;
  while (!stop) {
    op_at_ = pos_;
    if (pos_ >= data_.size()) return Corrupt("no STOP; file truncated?");
    RETURN_IF_ERROR(Step(static_cast<uint8_t>(data_[pos_++]), &stop));
  }
  if (stack_.size() != 1 || !marks_.empty()) return Corrupt("STOP with a stack that is not one value");
  if (consumed != nullptr) *consumed = pos_;
  return stack_.back();
}

absl::Status Machine::PushLong(size_t n) {
  std::string_view bytes;
  RETURN_IF_ERROR(Read(n, &bytes));
  Ref v = Make(Kind::kInt);
  if (n > 8) {
    v->big = true;
    v->s.assign(bytes);
    return Push(std::move(v));
  }
  uint64_t u = 0;
  for (size_t k = 0; k < n; ++k) u |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[k])) << (8 * k);
  if (n > 0 && n < 8 && (static_cast<uint8_t>(bytes[n - 1]) & 0x80)) u |= ~uint64_t{0} << (8 * n);  // sign-extend
  v->i = static_cast<int64_t>(u);
  return Push(std::move(v));
}

absl::Status Machine::Append(const Ref& list, std::vector<Ref> items) {
  if (list->kind != Kind::kList) return Corrupt(absl::StrCat("APPEND to ", Describe(*list)));
  for (Ref& item : items) list->items.push_back(std::move(item));
  return absl::OkStatus();
}

absl::Status Machine::SetItems(const Ref& dict, std::vector<Ref> items) {
  if (dict->kind != Kind::kDict) return Corrupt(absl::StrCat("SETITEM on ", Describe(*dict)));
  if (items.size() % 2 != 0) return Corrupt("SETITEMS with an odd number of items");
  for (size_t k = 0; k < items.size(); k += 2) {
    // A repeated key replaces the value, as in Python (string keys; others
    // only matter for the error that they are not tensor names).
    if (items[k]->kind == Kind::kString) {
      auto [it, inserted] = dict->keys.emplace(items[k]->s, dict->items.size());
      if (!inserted) {
        dict->items[it->second + 1] = std::move(items[k + 1]);
        continue;
      }
    }
    dict->items.push_back(std::move(items[k]));
    dict->items.push_back(std::move(items[k + 1]));
  }
  return absl::OkStatus();
}

absl::Status Machine::PersistentId(const Ref& pid) {
  // ('storage', torch.FloatStorage, key, location, numel[, view_metadata])
  const std::vector<Ref>& t = pid->items;
  if (pid->kind != Kind::kTuple || t.size() < 5 || t[0]->kind != Kind::kString || t[0]->s != "storage") {
    return absl::InvalidArgumentError(
        absl::StrCat("persistent id ", Describe(*pid), " is not a torch storage ('storage', type, key, ...)"));
  }
  if (t[1]->kind != Kind::kGlobal) return Corrupt("storage type is not a class");
  Ref storage = Make(Kind::kStorage);
  if (!StorageDType(t[1]->s, &storage->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("storage type ", t[1]->s,
                                                   " is not supported (float, half, bfloat16, double, integer and "
                                                   "bool storages are)"));
  }
  if (t[2]->kind != Kind::kString && t[2]->kind != Kind::kInt) return Corrupt("storage key is not a string");
  storage->s = t[2]->kind == Kind::kString ? t[2]->s : absl::StrCat(t[2]->i);
  if (t[4]->kind != Kind::kInt || t[4]->big || t[4]->i < 0) return Corrupt("storage size is not a count");
  storage->numel = t[4]->i;
  if (t.size() >= 6 && t[5]->kind == Kind::kTuple) {
    // Legacy storage view: (view_key, offset, view_size) into the root storage.
    const std::vector<Ref>& view = t[5]->items;
    if (view.size() != 3 || view[1]->kind != Kind::kInt || view[2]->kind != Kind::kInt || view[1]->i < 0 ||
        view[2]->i < 0 || view[1]->i > storage->numel || view[2]->i > storage->numel - view[1]->i) {
      return Corrupt("storage view outside its storage");
    }
    storage->view_offset = view[1]->i;
  }
  auto [it, inserted] = storages_.emplace(storage->s, PickledStorage{storage->dtype, storage->numel});
  if (!inserted && (it->second.dtype != storage->dtype || it->second.numel != storage->numel)) {
    return Corrupt(absl::StrCat("storage ", storage->s, " declared twice with different types or sizes"));
  }
  if (storage->view_offset > 0) {
    // The storage value stands for the view: its elements start there.
    storage->numel -= storage->view_offset;
  }
  return Push(std::move(storage));
}

bool IntTuple(const Ref& v, std::vector<int64_t>* out) {
  if (v->kind != Kind::kTuple && v->kind != Kind::kList) return false;
  out->clear();
  for (const Ref& item : v->items) {
    if (item->kind != Kind::kInt || item->big) return false;
    out->push_back(item->i);
  }
  return true;
}

// _rebuild_tensor(_v2)(storage, storage_offset, size, stride, ...)
absl::StatusOr<Ref> Machine::RebuildTensor(const std::vector<Ref>& args) {
  if (args.size() < 4 || args[0]->kind != Kind::kStorage || args[1]->kind != Kind::kInt || args[1]->big) {
    return Corrupt("tensor rebuild arguments are not (storage, offset, size, stride, ...)");
  }
  Ref tensor = Make(Kind::kTensor);
  PickledTensor& t = tensor->tensor;
  const Value& storage = *args[0];
  t.storage_key = storage.s;
  t.dtype = storage.dtype;
  t.storage_offset = args[1]->i;
  if (!IntTuple(args[2], &t.shape) || !IntTuple(args[3], &t.strides) || t.shape.size() != t.strides.size()) {
    return Corrupt("tensor size and stride are not integer tuples of one length");
  }
  if (t.storage_offset < 0) return Corrupt("negative storage offset");
  // Extent check: the last element must lie inside the storage (view).
  int64_t last = t.storage_offset;
  bool empty = false;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] < 0 || t.strides[d] < 0) return Corrupt("negative size or stride");
    if (t.shape[d] == 0) empty = true;
  }
  if (!empty) {
    for (size_t d = 0; d < t.shape.size(); ++d) {
      int64_t step;
      if (__builtin_mul_overflow(t.shape[d] - 1, t.strides[d], &step) || __builtin_add_overflow(last, step, &last)) {
        return Corrupt("tensor extent overflows");
      }
    }
    if (last >= storage.numel) {
      return absl::DataLossError(absl::StrCat("a tensor of shape [", absl::StrJoin(t.shape, ", "),
                                              "] at offset ", t.storage_offset, " runs past its storage ", storage.s,
                                              " of ", storage.numel, " elements"));
    }
  }
  t.storage_offset += storage.view_offset;
  return tensor;
}

absl::Status Machine::Reduce(const Ref& callable, const Ref& args) {
  if (args->kind != Kind::kTuple) return Corrupt("REDUCE arguments are not a tuple");
  const std::string name = callable->kind == Kind::kGlobal ? callable->s : "";
  if (name == "collections.OrderedDict" || name == "builtins.dict") {
    Ref dict = Make(Kind::kDict);
    if (!args->items.empty() && args->items[0]->kind == Kind::kList) {  // OrderedDict([(k, v), ...])
      std::vector<Ref> pairs;
      for (const Ref& pair : args->items[0]->items) {
        if (pair->kind != Kind::kTuple || pair->items.size() != 2) return Corrupt("dict items are not pairs");
        pairs.push_back(pair->items[0]);
        pairs.push_back(pair->items[1]);
      }
      RETURN_IF_ERROR(SetItems(dict, std::move(pairs)));
    }
    return Push(std::move(dict));
  }
  if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
    ASSIGN_OR_RETURN(Ref tensor, RebuildTensor(args->items));
    return Push(std::move(tensor));
  }
  if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") {
    if (args->items.empty() || args->items[0]->kind != Kind::kTensor) return Corrupt("parameter without a tensor");
    return Push(args->items[0]);
  }
  Ref object = Make(Kind::kObject);
  object->s = name.empty() ? Describe(*callable) : name;
  return Push(std::move(object));
}

absl::Status Machine::Step(uint8_t op, bool* stop) {
  std::string_view bytes;
  Ref a, b, c;
  std::vector<Ref> items;
  switch (op) {
    case 0x80: return Read(1, &bytes);  // PROTO
    case 0x95: return Read(8, &bytes);  // FRAME: a length hint
    case '.': *stop = true; return absl::OkStatus();  // STOP
    case '(':  // MARK
      if (marks_.size() > (1u << 20)) return Corrupt("too many MARKs");
      marks_.push_back(stack_.size());
      return absl::OkStatus();
    case '0': return Pop(&a);  // POP
    case '1': return PopMark(&items);  // POP_MARK
    case '2': RETURN_IF_ERROR(Top(&a)); return Push(a);  // DUP
    case 'N': return Push(Make(Kind::kNone));
    case 0x88: case 0x89: {  // NEWTRUE, NEWFALSE
      Ref v = Make(Kind::kBool);
      v->i = op == 0x88;
      return Push(std::move(v));
    }
    case 'J': { int32_t v; RETURN_IF_ERROR(ReadLe(&v)); return PushInt(v); }   // BININT
    case 'K': { uint8_t v; RETURN_IF_ERROR(ReadLe(&v)); return PushInt(v); }   // BININT1
    case 'M': { uint16_t v; RETURN_IF_ERROR(ReadLe(&v)); return PushInt(v); }  // BININT2
    case 0x8a: { uint8_t n; RETURN_IF_ERROR(ReadLe(&n)); return PushLong(n); }   // LONG1
    case 0x8b: {  // LONG4
      int32_t n;
      RETURN_IF_ERROR(ReadLe(&n));
      if (n < 0) return Corrupt("negative LONG4 length");
      return PushLong(static_cast<size_t>(n));
    }
    case 'I': {  // INT (text); "00"/"01" are the protocol-0 booleans
      RETURN_IF_ERROR(ReadLine(&bytes));
      int64_t v = 0;
      if (bytes.empty() || bytes.size() > 18) return Corrupt("bad INT");
      size_t k = bytes[0] == '-' ? 1 : 0;
      if (k == bytes.size()) return Corrupt("bad INT");
      for (; k < bytes.size(); ++k) {
        if (bytes[k] < '0' || bytes[k] > '9') return Corrupt("bad INT");
        v = v * 10 + (bytes[k] - '0');
      }
      return PushInt(bytes[0] == '-' ? -v : v);
    }
    case 'G': {  // BINFLOAT (big-endian)
      RETURN_IF_ERROR(Read(8, &bytes));
      uint64_t u = 0;
      for (char ch : bytes) u = (u << 8) | static_cast<uint8_t>(ch);
      Ref v = Make(Kind::kFloat);
      std::memcpy(&v->f, &u, 8);
      return Push(std::move(v));
    }
    case 'X': case 'T': case 'B': {  // BINUNICODE, BINSTRING, BINBYTES
      uint32_t n;
      RETURN_IF_ERROR(ReadLe(&n));
      return PushString(op == 'B' ? Kind::kBytes : Kind::kString, n);
    }
    case 0x8c: case 'U': case 'C': {  // SHORT_BINUNICODE, SHORT_BINSTRING, SHORT_BINBYTES
      uint8_t n;
      RETURN_IF_ERROR(ReadLe(&n));
      return PushString(op == 'C' ? Kind::kBytes : Kind::kString, n);
    }
    case 0x8d: case 0x8e: case 0x96: {  // BINUNICODE8, BINBYTES8, BYTEARRAY8
      uint64_t n;
      RETURN_IF_ERROR(ReadLe(&n));
      if (n > data_.size()) return Corrupt("string longer than the file; file truncated?");
      return PushString(op == 0x8d ? Kind::kString : Kind::kBytes, static_cast<size_t>(n));
    }
    case ')': return PushContainer(Kind::kTuple, {});  // EMPTY_TUPLE
    case 't': RETURN_IF_ERROR(PopMark(&items)); return PushContainer(Kind::kTuple, std::move(items));  // TUPLE
    case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
      const size_t n = op - 0x84;
      if (stack_.size() < Floor() + n) return Corrupt("stack underflow");
      items.assign(std::make_move_iterator(stack_.end() - n), std::make_move_iterator(stack_.end()));
      stack_.resize(stack_.size() - n);
      return PushContainer(Kind::kTuple, std::move(items));
    }
    case ']': case 0x8f: return PushContainer(Kind::kList, {});  // EMPTY_LIST, EMPTY_SET
    case 'l': RETURN_IF_ERROR(PopMark(&items)); return PushContainer(Kind::kList, std::move(items));  // LIST
    case 0x91: RETURN_IF_ERROR(PopMark(&items)); return PushContainer(Kind::kList, std::move(items));  // FROZENSET
    case 'a':  // APPEND
      RETURN_IF_ERROR(Pop(&a));
      RETURN_IF_ERROR(Top(&b));
      return Append(b, {a});
    case 'e': case 0x90:  // APPENDS, ADDITEMS
      RETURN_IF_ERROR(PopMark(&items));
      RETURN_IF_ERROR(Top(&b));
      return Append(b, std::move(items));
    case '}': return PushContainer(Kind::kDict, {});  // EMPTY_DICT
    case 'd': {  // DICT
      RETURN_IF_ERROR(PopMark(&items));
      Ref dict = Make(Kind::kDict);
      RETURN_IF_ERROR(SetItems(dict, std::move(items)));
      return Push(std::move(dict));
    }
    case 's':  // SETITEM
      RETURN_IF_ERROR(Pop(&b));
      RETURN_IF_ERROR(Pop(&a));
      RETURN_IF_ERROR(Top(&c));
      return SetItems(c, {a, b});
    case 'u':  // SETITEMS
      RETURN_IF_ERROR(PopMark(&items));
      RETURN_IF_ERROR(Top(&c));
      return SetItems(c, std::move(items));
    case 'c': {  // GLOBAL "module\nname\n"
      std::string_view module, name;
      RETURN_IF_ERROR(ReadLine(&module));
      RETURN_IF_ERROR(ReadLine(&name));
      Ref v = Make(Kind::kGlobal);
      v->s = absl::StrCat(std::string(module), ".", std::string(name));
      return Push(std::move(v));
    }
    case 0x93: {  // STACK_GLOBAL
      RETURN_IF_ERROR(Pop(&b));
      RETURN_IF_ERROR(Pop(&a));
      if (a->kind != Kind::kString || b->kind != Kind::kString) return Corrupt("STACK_GLOBAL of non-strings");
      Ref v = Make(Kind::kGlobal);
      v->s = absl::StrCat(a->s, ".", b->s);
      return Push(std::move(v));
    }
    case 'q': { uint8_t i; RETURN_IF_ERROR(ReadLe(&i)); return Memo(i); }   // BINPUT
    case 'r': { uint32_t i; RETURN_IF_ERROR(ReadLe(&i)); return Memo(i); }  // LONG_BINPUT
    case 0x94: return Memo(next_memo_++);                                     // MEMOIZE
    case 'h': { uint8_t i; RETURN_IF_ERROR(ReadLe(&i)); return Get(i); }    // BINGET
    case 'j': { uint32_t i; RETURN_IF_ERROR(ReadLe(&i)); return Get(i); }   // LONG_BINGET
    case 'p': case 'g': {  // PUT, GET (text)
      RETURN_IF_ERROR(ReadLine(&bytes));
      uint32_t i = 0;
      if (bytes.empty() || bytes.size() > 9) return Corrupt("bad memo index");
      for (char ch : bytes) {
        if (ch < '0' || ch > '9') return Corrupt("bad memo index");
        i = i * 10 + (ch - '0');
      }
      return op == 'p' ? Memo(i) : Get(i);
    }
    case 'R':  // REDUCE
      RETURN_IF_ERROR(Pop(&b));
      RETURN_IF_ERROR(Pop(&a));
      return Reduce(a, b);
    case 0x81: case 0x92: {  // NEWOBJ, NEWOBJ_EX: cls.__new__(cls, *args[, **kwargs])
      if (op == 0x92) RETURN_IF_ERROR(Pop(&c));
      RETURN_IF_ERROR(Pop(&b));
      RETURN_IF_ERROR(Pop(&a));
      if (a->kind == Kind::kGlobal && a->s == "collections.OrderedDict") return Push(Make(Kind::kDict));
      Ref object = Make(Kind::kObject);
      object->s = a->kind == Kind::kGlobal ? a->s : Describe(*a);
      return Push(std::move(object));
    }
    case 'b':  // BUILD: the state (a state_dict's _metadata, an object's __dict__) is not needed
      RETURN_IF_ERROR(Pop(&b));
      return Top(&a);
    case 'Q':  // BINPERSID
      RETURN_IF_ERROR(Pop(&a));
      return PersistentId(a);
    default:
      return Corrupt(absl::StrFormat("unsupported opcode 0x%02x", op));
  }
}

absl::StatusOr<Ref> Unpickle(std::string_view data, size_t* consumed, std::map<std::string, PickledStorage>* storages) {
  Machine machine(data);
  ASSIGN_OR_RETURN(Ref result, machine.Run(consumed));
  if (storages != nullptr) *storages = machine.storages();
  return result;
}

}  // namespace

absl::StatusOr<StateDictPickle> ParseStateDictPickle(std::string_view data, size_t* consumed) {
  StateDictPickle out;
  ASSIGN_OR_RETURN(Ref root, Unpickle(data, consumed, &out.storages));
  if (root->kind != Kind::kDict) {
    return absl::InvalidArgumentError(
        absl::StrCat("holds ", Describe(*root), ", not a state_dict (a dict of tensor names to tensors)",
                     root->kind == Kind::kObject ? "; save model.state_dict(), not the model" : ""));
  }
  if (root->items.empty()) return absl::InvalidArgumentError("holds an empty dict, not a state_dict");
  for (size_t k = 0; k < root->items.size(); k += 2) {
    const Value& key = *root->items[k];
    const Value& value = *root->items[k + 1];
    if (key.kind != Kind::kString) {
      return absl::InvalidArgumentError(
          absl::StrCat("holds a dict with ", Describe(key), " as a key, not a state_dict (tensor names are strings)"));
    }
    if (value.kind != Kind::kTensor) {
      return absl::InvalidArgumentError(absl::StrCat("not a state_dict: entry '", key.s, "' is ", Describe(value),
                                                     ", not a tensor"));
    }
    PickledTensor tensor = value.tensor;
    tensor.name = key.s;
    out.tensors.push_back(std::move(tensor));
  }
  return out;
}

absl::Status ParseLegacyHeader(std::string_view data, size_t* consumed) {
  size_t n = 0, total = 0;
  ASSIGN_OR_RETURN(Ref magic, Unpickle(data, &n, nullptr));
  total += n;
  // 0x1950a86a20f9469cfc6c, little-endian.
  static const std::string kMagic("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10);
  if (magic->kind != Kind::kInt || !magic->big || magic->s != kMagic) {
    return absl::DataLossError("no legacy torch.save magic number");
  }
  ASSIGN_OR_RETURN(Ref protocol, Unpickle(data.substr(total), &n, nullptr));
  total += n;
  if (protocol->kind != Kind::kInt || protocol->i != 1001) {
    return absl::FailedPreconditionError("legacy torch.save protocol version is not 1001");
  }
  ASSIGN_OR_RETURN(Ref sys_info, Unpickle(data.substr(total), &n, nullptr));
  total += n;
  if (sys_info->kind == Kind::kDict) {
    for (size_t k = 0; k + 1 < sys_info->items.size(); k += 2) {
      const Value& key = *sys_info->items[k];
      const Value& value = *sys_info->items[k + 1];
      if (key.kind == Kind::kString && key.s == "little_endian" && value.kind == Kind::kBool && value.i == 0) {
        return absl::FailedPreconditionError("saved on a big-endian machine; only little-endian files are read");
      }
    }
  }
  *consumed = total;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ParseStorageKeyList(std::string_view data, size_t* consumed) {
  ASSIGN_OR_RETURN(Ref list, Unpickle(data, consumed, nullptr));
  if (list->kind != Kind::kList) return absl::DataLossError("legacy storage key list missing");
  std::vector<std::string> keys;
  for (const Ref& item : list->items) {
    if (item->kind == Kind::kString) {
      keys.push_back(item->s);
    } else if (item->kind == Kind::kInt && !item->big) {
      keys.push_back(absl::StrCat(item->i));
    } else {
      return absl::DataLossError("legacy storage key list holds a non-string");
    }
  }
  return keys;
}

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d > 1; --d) strides[d - 2] = strides[d - 1] * shape[d - 1];
  return strides;
}

void GatherStrided(const PickledTensor& t, const char* storage, size_t element_size, std::string* out) {
  int64_t numel = 1;
  for (int64_t d : t.shape) numel *= d;
  out->resize(static_cast<size_t>(numel) * element_size);
  if (numel == 0) return;
  const size_t rank = t.shape.size();
  std::vector<int64_t> index(rank, 0);
  char* dst = out->data();
  int64_t src = t.storage_offset;
  for (int64_t n = 0; n < numel; ++n) {
    std::memcpy(dst, storage + static_cast<size_t>(src) * element_size, element_size);
    dst += element_size;
    // Odometer increment over the dimensions, last fastest.
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < t.shape[d]) {
        src += t.strides[d];
        break;
      }
      src -= (t.shape[d] - 1) * t.strides[d];
      index[d] = 0;
    }
  }
}

}  // namespace dserve
