//===- Parse.cpp - Chat templates: tags, whitespace and expressions -------===//
//
// The template is split into text and tags ({{ }}, {% %}, {# #}) with
// Hugging Face's whitespace settings (trim_blocks: the newline after a block
// tag goes; lstrip_blocks: spaces before a block tag on its line go; '-'
// strips every blank on its side), then parsed by recursive descent.
//
//===----------------------------------------------------------------------===//

#include "Jinja.h"

#include <cctype>
#include <set>

using namespace mfrt::jinja;

namespace {
[[noreturn]] void fail(int line, const std::string &msg) {
  throw Error("line " + std::to_string(line) + ": " + msg);
}

/// A piece of the template: text, or a tag's inside.
struct Piece {
  enum Kind { Text, Var, Block } kind;
  std::string text;
  int line;
};

bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void stripRight(std::string &s) {
  while (!s.empty() && blank(s.back()))
    s.pop_back();
}

/// lstrip_blocks: the spaces and tabs between the last newline of `s` (or
/// its start, at the template's start) and a block tag go.
void stripLineStart(std::string &s, bool atStart) {
  size_t i = s.size();
  while (i > 0 && (s[i - 1] == ' ' || s[i - 1] == '\t'))
    --i;
  if ((i == 0 && atStart) || (i > 0 && s[i - 1] == '\n'))
    s.resize(i);
}

std::vector<Piece> split(const std::string &src) {
  std::vector<Piece> pieces;
  std::string text;
  int line = 1;
  bool stripNext = false, trimNext = false;
  size_t i = 0;
  auto flushText = [&](int at) {
    pieces.push_back({Piece::Text, text, at});
    text.clear();
  };
  while (i < src.size()) {
    bool tag = src[i] == '{' && i + 1 < src.size() &&
               (src[i + 1] == '{' || src[i + 1] == '%' || src[i + 1] == '#');
    if (!tag) {
      char c = src[i++];
      if (trimNext && c == '\n') {
        trimNext = false;
        ++line;
        continue;
      }
      trimNext = false;
      if (stripNext && blank(c)) {
        line += c == '\n';
        continue;
      }
      stripNext = false;
      text += c;
      line += c == '\n';
      continue;
    }
    char open = src[i + 1];
    const char *close = open == '{' ? "}}" : open == '%' ? "%}" : "#}";
    size_t body = i + 2;
    bool minusLeft = body < src.size() && src[body] == '-';
    bool plusLeft = body < src.size() && src[body] == '+';
    if (minusLeft || plusLeft)
      ++body;
    // The tag ends at its closing delimiter outside quotes.
    size_t j = body;
    char quote = 0;
    for (; j + 1 < src.size(); ++j) {
      if (open != '#' && quote == 0 && (src[j] == '\'' || src[j] == '"'))
        quote = src[j];
      else if (quote && src[j] == '\\')
        ++j;
      else if (quote && src[j] == quote)
        quote = 0;
      else if (!quote && src[j] == close[0] && src[j + 1] == close[1])
        break;
    }
    if (j + 1 >= src.size())
      fail(line,
           std::string("a tag opened with '{") + open + "' is never closed");
    bool minusRight = j > body && src[j - 1] == '-';
    std::string inside = src.substr(body, (minusRight ? j - 1 : j) - body);
    trimNext = stripNext = false;
    if (minusLeft)
      stripRight(text);
    else if (open != '{' && !plusLeft)
      stripLineStart(text, pieces.empty());
    flushText(line);
    int tagLine = line;
    for (char c : inside)
      line += c == '\n';
    if (open != '#')
      pieces.push_back(
          {open == '{' ? Piece::Var : Piece::Block, inside, tagLine});
    i = j + 2;
    stripNext = minusRight;
    trimNext = !minusRight && open != '{';
  }
  flushText(line);
  return pieces;
}

/// An expression's token.
struct Token {
  enum Kind { Name, Int, Float, String, Op, End } kind;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

std::vector<Token> lex(const std::string &s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (blank(c)) {
      ++i;
      continue;
    }
    if (std::isalpha((unsigned char)c) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum((unsigned char)s[j]) || s[j] == '_'))
        ++j;
      out.push_back({Token::Name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit((unsigned char)c)) {
      size_t j = i;
      while (j < s.size() && (std::isdigit((unsigned char)s[j]) || s[j] == '_'))
        ++j;
      bool isFloat = j + 1 < s.size() && s[j] == '.' &&
                     std::isdigit((unsigned char)s[j + 1]);
      if (isFloat) {
        ++j;
        while (j < s.size() && std::isdigit((unsigned char)s[j]))
          ++j;
      }
      std::string num = s.substr(i, j - i);
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      Token t{isFloat ? Token::Float : Token::Int, num};
      if (isFloat)
        t.f = std::stod(num);
      else
        t.i = std::stoll(num);
      out.push_back(t);
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 == s.size()) {
          v += s[j];
          continue;
        }
        char e = s[++j];
        v += e == 'n'   ? '\n'
             : e == 't' ? '\t'
             : e == 'r' ? '\r'
             : e == '0' ? '\0'
                        : e;
        if (e != 'n' && e != 't' && e != 'r' && e != '0' && e != '\\' &&
            e != '\'' && e != '"')
          v.insert(v.size() - 1, 1, '\\');
      }
      if (j >= s.size())
        fail(line, "a string is never closed");
      out.push_back({Token::String, v});
      i = j + 1;
    } else {
      static const char *ops[] = {
          "==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%",
          "~",  "|",  ".",  ",",  ":",  "(",  ")", "[", "]", "{", "}", "="};
      bool found = false;
      for (const char *op : ops)
        if (s.compare(i, std::strlen(op), op) == 0) {
          out.push_back({Token::Op, op});
          i += std::strlen(op);
          found = true;
          break;
        }
      if (!found)
        fail(line, std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Token::End, ""});
  return out;
}

/// Recursive descent over one tag's tokens.
class ExprParser {
public:
  ExprParser(std::vector<Token> t, int line) : toks(std::move(t)), line(line) {}

  bool atEnd() const { return peek().kind == Token::End; }
  const Token &peek(size_t k = 0) const {
    return toks[std::min(pos + k, toks.size() - 1)];
  }
  bool isOp(const char *op, size_t k = 0) const {
    return peek(k).kind == Token::Op && peek(k).text == op;
  }
  bool isName(const char *n, size_t k = 0) const {
    return peek(k).kind == Token::Name && peek(k).text == n;
  }
  bool acceptOp(const char *op) {
    if (!isOp(op))
      return false;
    ++pos;
    return true;
  }
  bool acceptName(const char *n) {
    if (!isName(n))
      return false;
    ++pos;
    return true;
  }
  void expectOp(const char *op) {
    if (!acceptOp(op))
      fail(line,
           std::string("expected '") + op + "', got '" + peek().text + "'");
  }
  std::string name() {
    if (peek().kind != Token::Name)
      fail(line, "expected a name, got '" + peek().text + "'");
    return toks[pos++].text;
  }
  void expectEnd() {
    if (!atEnd())
      fail(line, "unexpected '" + peek().text + "'");
  }

  ExprPtr make(Expr::Kind k, std::vector<ExprPtr> args = {},
               std::string n = "") {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->args = std::move(args);
    e->name = std::move(n);
    e->line = line;
    return e;
  }

  /// expr := or ('if' or ('else' expr)?)?
  ExprPtr expr() {
    ExprPtr e = orExpr();
    if (!acceptName("if"))
      return e;
    ExprPtr cond = orExpr();
    ExprPtr other = acceptName("else") ? expr() : nullptr;
    std::vector<ExprPtr> args = {cond, e};
    if (other)
      args.push_back(other);
    return make(Expr::Cond, args);
  }
  ExprPtr orExpr() {
    ExprPtr e = andExpr();
    while (acceptName("or"))
      e = make(Expr::Or, {e, andExpr()});
    return e;
  }
  ExprPtr andExpr() {
    ExprPtr e = notExpr();
    while (acceptName("and"))
      e = make(Expr::And, {e, notExpr()});
    return e;
  }
  ExprPtr notExpr() {
    if (acceptName("not"))
      return make(Expr::Not, {notExpr()});
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = concat();
    for (;;) {
      std::string op;
      for (const char *o : {"==", "!=", "<=", ">=", "<", ">"})
        if (isOp(o))
          op = o;
      if (!op.empty()) {
        ++pos;
      } else if (isName("in")) {
        ++pos;
        op = "in";
      } else if (isName("not") && isName("in", 1)) {
        pos += 2;
        op = "not in";
      } else if (isName("is")) {
        ++pos;
        e = test(e);
        continue;
      } else {
        return e;
      }
      e = make(Expr::Binary, {e, concat()}, op);
    }
  }
  ExprPtr test(ExprPtr subject) {
    bool negated = acceptName("not");
    std::string t = name();
    if (!knownTest(t))
      fail(line, "the test '" + t + "' is not supported");
    ExprPtr e = make(Expr::Test, {subject}, t);
    e->negated = negated;
    if (isOp("(")) {
      callArgs(*e);
    } else if (!atEnd() && peek().kind != Token::Op && !isName("and") &&
               !isName("or") && !isName("else") && !isName("if")) {
      e->args.push_back(concat()); // `is divisibleby 3`
    }
    e->positional = e->args.size();
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = additive();
    while (acceptOp("~"))
      e = make(Expr::Binary, {e, additive()}, "~");
    return e;
  }
  ExprPtr additive() {
    ExprPtr e = multiplicative();
    while (isOp("+") || isOp("-")) {
      std::string op = toks[pos++].text;
      e = make(Expr::Binary, {e, multiplicative()}, op);
    }
    return e;
  }
  ExprPtr multiplicative() {
    ExprPtr e = unary();
    while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
      std::string op = toks[pos++].text;
      e = make(Expr::Binary, {e, unary()}, op);
    }
    return e;
  }
  ExprPtr unary() {
    if (isOp("-") || isOp("+")) {
      std::string op = toks[pos++].text;
      return make(Expr::Unary, {unary()}, op);
    }
    ExprPtr e = postfix(primary());
    if (acceptOp("**"))
      e = make(Expr::Binary, {e, unary()}, "**");
    return e;
  }
  /// Arguments of a call: positional, then name=value.
  void callArgs(Expr &call) {
    expectOp("(");
    std::vector<ExprPtr> positional, named;
    while (!acceptOp(")")) {
      if (peek().kind == Token::Name && isOp("=", 1)) {
        call.keys.push_back(name());
        ++pos;
        named.push_back(expr());
      } else {
        if (!named.empty())
          fail(line, "a positional argument after a keyword argument");
        positional.push_back(expr());
      }
      if (!isOp(")"))
        expectOp(",");
    }
    call.positional = call.args.size() + positional.size();
    call.args.insert(call.args.end(), positional.begin(), positional.end());
    call.args.insert(call.args.end(), named.begin(), named.end());
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (acceptOp(".")) {
        e = make(Expr::Attr, {e}, name());
      } else if (isOp("[")) {
        ++pos;
        e = subscript(e);
      } else if (isOp("(")) {
        ExprPtr call = make(Expr::Call, {e});
        callArgs(*call);
        e = call;
      } else if (acceptOp("|")) {
        std::string f = name();
        if (!knownFilter(f))
          fail(line, "the filter '" + f + "' is not supported");
        ExprPtr call = make(Expr::Filter, {e}, f);
        if (isOp("("))
          callArgs(*call);
        else
          call->positional = 1;
        e = call;
      } else {
        return e;
      }
    }
  }
  ExprPtr subscript(ExprPtr e) {
    std::vector<ExprPtr> parts(3);
    size_t part = 0;
    bool slice = false;
    while (!acceptOp("]")) {
      if (acceptOp(":")) {
        slice = true;
        if (++part > 2)
          fail(line, "a slice has at most 3 parts");
        continue;
      }
      if (parts[part])
        fail(line, "expected ']'");
      parts[part] = expr();
    }
    if (!slice) {
      if (!parts[0])
        fail(line, "an empty subscript");
      return make(Expr::Item, {e, parts[0]});
    }
    ExprPtr s = make(Expr::Slice, {e, parts[0], parts[1], parts[2]});
    return s;
  }
  ExprPtr primary() {
    const Token &t = peek();
    if (t.kind == Token::String) {
      ++pos;
      std::string s = t.text;
      while (peek().kind == Token::String) // adjacent literals join
        s += toks[pos++].text;
      return literal(Value::string(s));
    }
    if (t.kind == Token::Int) {
      ++pos;
      return literal(Value::integer(t.i));
    }
    if (t.kind == Token::Float) {
      ++pos;
      return literal(Value::number(t.f));
    }
    if (t.kind == Token::Name) {
      ++pos;
      if (t.text == "true" || t.text == "True")
        return literal(Value::boolean(true));
      if (t.text == "false" || t.text == "False")
        return literal(Value::boolean(false));
      if (t.text == "none" || t.text == "None")
        return literal(Value::none());
      return make(Expr::Name, {}, t.text);
    }
    if (acceptOp("(")) {
      if (acceptOp(")"))
        return make(Expr::List, {}, "tuple");
      ExprPtr e = expr();
      if (!isOp(","))
        return expectOp(")"), e;
      std::vector<ExprPtr> items = {e};
      while (acceptOp(",") && !isOp(")"))
        items.push_back(expr());
      expectOp(")");
      return make(Expr::List, items, "tuple");
    }
    if (acceptOp("[")) {
      std::vector<ExprPtr> items;
      while (!acceptOp("]")) {
        items.push_back(expr());
        if (!isOp("]"))
          expectOp(",");
      }
      return make(Expr::List, items);
    }
    if (acceptOp("{")) {
      ExprPtr d = make(Expr::Dict);
      while (!acceptOp("}")) {
        d->args.push_back(expr());
        expectOp(":");
        d->args.push_back(expr());
        if (!isOp("}"))
          expectOp(",");
      }
      return d;
    }
    fail(line, t.kind == Token::End ? "an expression is missing"
                                    : "unexpected '" + t.text + "'");
  }
  ExprPtr literal(Value v) {
    ExprPtr e = make(Expr::Literal);
    e->value = std::move(v);
    return e;
  }

private:
  std::vector<Token> toks;
  size_t pos = 0;
  int line;
};

/// Statements over the pieces.
class TreeParser {
public:
  explicit TreeParser(std::vector<Piece> p) : pieces(std::move(p)) {}

  NodePtr parse() {
    auto root = node(Node::Block, 1);
    root->bodies.push_back(body({}));
    if (at < pieces.size())
      fail(pieces[at].line, "unexpected '" + keyword(pieces[at]) + "'");
    return root;
  }

private:
  static std::string keyword(const Piece &p) {
    std::vector<Token> t = lex(p.text, p.line);
    return t[0].text;
  }
  NodePtr node(Node::Kind k, int line) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    n->line = line;
    return n;
  }
  /// Nodes up to a block tag whose keyword is in `ends` (left unconsumed).
  std::vector<NodePtr> body(const std::set<std::string> &ends,
                            int openLine = 0) {
    std::vector<NodePtr> out;
    while (at < pieces.size()) {
      const Piece &p = pieces[at];
      if (p.kind == Piece::Text) {
        if (!p.text.empty()) {
          NodePtr n = node(Node::Text, p.line);
          n->text = p.text;
          out.push_back(n);
        }
        ++at;
      } else if (p.kind == Piece::Var) {
        ExprParser e(lex(p.text, p.line), p.line);
        NodePtr n = node(Node::Output, p.line);
        n->exprs.push_back(e.expr());
        e.expectEnd();
        out.push_back(n);
        ++at;
      } else {
        if (ends.count(keyword(p)))
          return out;
        out.push_back(statement());
      }
    }
    if (!ends.empty())
      fail(openLine,
           "this block is never closed ('" + *ends.rbegin() + "' is missing)");
    return out;
  }
  NodePtr statement() {
    const Piece &p = pieces[at++];
    ExprParser e(lex(p.text, p.line), p.line);
    std::string kw = e.name();
    if (kw == "if")
      return ifStatement(e, p.line);
    if (kw == "for")
      return forStatement(e, p.line);
    if (kw == "set")
      return setStatement(e, p.line);
    if (kw == "break" || kw == "continue") {
      e.expectEnd();
      return node(kw == "break" ? Node::Break : Node::Continue, p.line);
    }
    if (kw == "generation") {
      e.expectEnd();
      NodePtr n = node(Node::Block, p.line);
      n->bodies.push_back(body({"endgeneration"}, p.line));
      ++at;
      return n;
    }
    fail(p.line, "the statement '" + kw + "' is not supported");
  }
  /// The block tag at `at` (one of the ends `body` stopped at).
  ExprParser endTag() {
    const Piece &p = pieces[at++];
    ExprParser e(lex(p.text, p.line), p.line);
    e.name();
    return e;
  }
  NodePtr ifStatement(ExprParser &e, int line) {
    NodePtr n = node(Node::If, line);
    n->exprs.push_back(e.expr());
    e.expectEnd();
    for (;;) {
      n->bodies.push_back(body({"elif", "else", "endif"}, line));
      std::string kw = keyword(pieces[at]);
      ExprParser tag = endTag();
      if (kw == "endif")
        return tag.expectEnd(), n;
      if (kw == "else") {
        tag.expectEnd();
        n->bodies.push_back(body({"endif"}, line));
        endTag().expectEnd();
        return n;
      }
      n->exprs.push_back(tag.expr());
      tag.expectEnd();
    }
  }
  NodePtr forStatement(ExprParser &e, int line) {
    NodePtr n = node(Node::For, line);
    n->targets.push_back(e.name());
    while (e.acceptOp(","))
      n->targets.push_back(e.name());
    if (!e.acceptName("in"))
      fail(line, "expected 'in' in a for loop");
    n->exprs.push_back(e.orExpr());
    if (e.acceptName("if"))
      n->exprs.push_back(e.expr());
    if (e.acceptName("recursive"))
      fail(line, "recursive loops are not supported");
    e.expectEnd();
    n->bodies.push_back(body({"else", "endfor"}, line));
    std::string kw = keyword(pieces[at]);
    endTag().expectEnd();
    if (kw == "else") {
      n->bodies.push_back(body({"endfor"}, line));
      endTag().expectEnd();
    }
    return n;
  }
  NodePtr setStatement(ExprParser &e, int line) {
    NodePtr n = node(Node::Set, line);
    n->targets.push_back(e.name());
    if (e.acceptOp("."))
      n->attr = e.name();
    if (e.atEnd() && n->attr.empty()) {
      n->kind = Node::SetBlock;
      n->bodies.push_back(body({"endset"}, line));
      endTag().expectEnd();
      return n;
    }
    if (e.isOp(","))
      fail(line, "unpacking in set is not supported");
    e.expectOp("=");
    n->exprs.push_back(e.expr());
    e.expectEnd();
    return n;
  }

  std::vector<Piece> pieces;
  size_t at = 0;
};
} // namespace

NodePtr mfrt::jinja::parseTemplate(const std::string &source) {
  return TreeParser(split(source)).parse();
}
