//===- Jinja.h - The chat-template interpreter's values and tree -*- C++
//-*-===//
//
// Internal to mfrt_jinja: the values templates compute with (Value.cpp), the
// parsed tree (Parse.cpp) and the renderer (Render.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_JINJA_JINJA_H
#define MFRT_JINJA_JINJA_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mfrt::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;
/// Keyword arguments of a call.
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(std::vector<Value> &, Kwargs &)>;

/// A Jinja value: Python's None, bool, int, float, str, list, dict, a
/// namespace (a dict whose attributes `set` may change) or a function.
struct Value {
  enum Kind {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    String,
    ListV,
    DictV,
    Namespace,
    Fn
  };
  Kind kind = Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> fn;
  /// For an Undefined: the name it came from (for messages).
  std::string name;

  static Value none() { return kindOf(None); }
  static Value boolean(bool v) {
    Value x = kindOf(Bool);
    x.b = v;
    return x;
  }
  static Value integer(int64_t v) {
    Value x = kindOf(Int);
    x.i = v;
    return x;
  }
  static Value number(double v) {
    Value x = kindOf(Float);
    x.f = v;
    return x;
  }
  static Value string(std::string v) {
    Value x = kindOf(String);
    x.s = std::move(v);
    return x;
  }
  static Value listOf(List v) {
    Value x = kindOf(ListV);
    x.list = std::make_shared<List>(std::move(v));
    return x;
  }
  static Value dictOf(Dict v, Kind kind = DictV) {
    Value x = kindOf(kind);
    x.dict = std::make_shared<Dict>(std::move(v));
    return x;
  }
  static Value function(Function f) {
    Value x = kindOf(Fn);
    x.fn = std::make_shared<Function>(std::move(f));
    return x;
  }
  static Value undefined(std::string name) {
    Value x;
    x.name = std::move(name);
    return x;
  }
  static Value kindOf(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }
  bool isDict() const { return kind == DictV || kind == Namespace; }
  bool isNumber() const { return kind == Int || kind == Float || kind == Bool; }
  double asDouble() const {
    return kind == Float ? f : double(kind == Bool ? b : i);
  }
  /// The value of key `key` of a dict (null when absent).
  const Value *find(const std::string &key) const;
};

/// A failure while rendering (or a construct outside the subset).
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Value fromJson(const nlohmann::ordered_json &j);
/// Python's truth value.
bool truthy(const Value &v);
/// Python's str() of a value (what {{ }} prints).
std::string str(const Value &v);
/// json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: none).
std::string toJson(const Value &v, int indent);
/// Python's ==.
bool equal(const Value &a, const Value &b);
/// Python's < (numbers, strings, lists); fails on other kinds.
bool less(const Value &a, const Value &b);
/// Kinds' names for messages.
const char *kindName(const Value &v);

/// An expression.
struct Expr {
  enum Kind {
    Literal,
    Name,
    List,
    Dict,
    Attr,
    Item,
    Slice,
    Call,
    Filter,
    Test,
    Unary,
    Binary,
    And,
    Or,
    Not,
    Cond
  } kind;
  Value value;      // Literal
  std::string name; // Name, Attr, Filter, Test, the operator of Unary/Binary
  std::vector<std::shared_ptr<Expr>> args; // operands, then call arguments
  std::vector<std::string> keys;           // Dict keys; keyword names (Call)
  size_t positional = 0; // Call/Filter/Test: positional arguments in args
  bool negated = false;  // Test: `is not`
  int line = 0;
};
using ExprPtr = std::shared_ptr<Expr>;

/// A statement (a node of the template's tree).
struct Node {
  enum Kind {
    Text,
    Output,
    If,
    For,
    Set,
    SetBlock,
    Break,
    Continue,
    Block
  } kind;
  std::string text;                 // Text
  std::vector<std::string> targets; // For: loop variables; Set: name
  std::string attr;                 // Set: namespace attribute
  std::vector<ExprPtr> exprs;       // Output; If conditions; For: iterable,
                                    // filter; Set: value
  std::vector<std::vector<std::shared_ptr<Node>>>
      bodies; // If: per branch
              // (+ else); For: body, else; Block
  int line = 0;
};
using NodePtr = std::shared_ptr<Node>;

/// Parses a template (Parse.cpp); throws Error ("line N: ...").
NodePtr parseTemplate(const std::string &source);
/// Renders (Render.cpp); throws Error.
void renderTemplate(const Node &root, const Value &context, std::string &out);

/// The filters and tests the interpreter has (checked while parsing).
bool knownFilter(const std::string &name);
bool knownTest(const std::string &name);

} // namespace mfrt::jinja

#endif // MFRT_JINJA_JINJA_H
