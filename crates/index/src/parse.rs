//! One tree-sitter walk per file turns its syntax tree into components, call names and imports.
//!
//! A cursor walk rather than Queries: it visits each node once, and a table of kind ids per
//! grammar passes over the uninteresting nodes without looking up their kind names.

use std::collections::HashMap;

use tree_sitter::{Node, Parser};

use super::{Component, IndexError, Kind, Lang};

/// What a file contributes to edges, in file-local component indices.
#[derive(Debug, Clone, Default)]
pub(super) struct Links {
    /// Distinct `(component, name)` calls, each name `names[start..end]`: one arena per file
    /// rather than a string per call keeps the allocator out of the parse's way.
    pub calls: Vec<(u32, u32, u32)>,
    pub names: String,
    /// Per component, the type a method belongs to.
    pub parents: Vec<Option<u32>>,
    /// Raw specifiers, resolved to files once all files are parsed.
    pub imports: Vec<String>,
}

/// The node kinds the walk looks at, across all grammars: no name here means one thing in one
/// grammar and another elsewhere, except `import_statement` (Python and JS), told apart by `Lang`.
const KINDS: &str = "function_definition class_definition call import_statement \
    import_from_statement function_declaration generator_function_declaration class_declaration \
    abstract_class_declaration interface_declaration enum_declaration method_definition \
    variable_declarator field_definition public_field_definition call_expression new_expression \
    export_statement function_item struct_item union_item enum_item trait_item impl_item mod_item \
    use_declaration method_declaration type_spec import_spec jsx_opening_element \
    jsx_self_closing_element";

/// Kinds not entered when their text has no `(` after its first character (nor `<` where JSX
/// may be): statements, expressions and argument or parameter lists that then hold no call and
/// no definition (JS `new X` and tagged templates without parentheses aside), and imports, which
/// `visit` reads whole. This spares over half the nodes of Python (docstrings, plain assignments,
/// operands and arguments), and most of what the walk costs beyond parsing.
const PRUNED: &str = "expression_statement return_statement return_expression string \
    string_literal raw_string_literal interpreted_string_literal comment line_comment \
    block_comment import_statement import_from_statement use_declaration import_spec \
    attribute member_expression field_expression selector_expression subscript \
    subscript_expression index_expression binary_operator binary_expression \
    comparison_operator boolean_operator unary_operator unary_expression not_operator \
    dictionary object list array tuple pair keyword_argument conditional_expression \
    ternary_expression assignment augmented_assignment assignment_expression \
    augmented_assignment_expression argument_list arguments parameters formal_parameters \
    parameter_list parenthesized_expression";

/// Per node kind id: look at the node; do not enter it unless its text has a call mark.
const VISIT: u8 = 1;
const PRUNE: u8 = 2;

/// One parser per language, made on first use, so an unloadable grammar fails only the runs that
/// meet a file of its language.
#[derive(Default)]
pub(super) struct Parsers([Option<LangParser>; 6]);

pub(super) struct LangParser {
    parser: Parser,
    /// `VISIT | PRUNE` flags, indexed by node kind id.
    flags: Vec<u8>,
}

impl Parsers {
    pub fn get(&mut self, lang: Lang) -> Result<&mut LangParser, IndexError> {
        let slot = &mut self.0[lang as usize];
        if slot.is_none() {
            *slot = Some(LangParser::new(lang, lang.grammar())?);
        }
        Ok(slot.as_mut().expect("filled just above"))
    }
}

impl LangParser {
    pub fn new(lang: Lang, grammar: tree_sitter::Language) -> Result<LangParser, IndexError> {
        let mut parser = Parser::new();
        parser
            .set_language(&grammar)
            .map_err(|source| IndexError::Unavailable {
                module: lang.module().into(),
                source,
            })?;
        // By name over every id: one kind name can have several ids (aliases).
        let flag = |kind: &str| {
            let has = |list: &str| list.split_whitespace().any(|k| k == kind);
            (u8::from(has(KINDS)) * VISIT) | (u8::from(has(PRUNED)) * PRUNE)
        };
        let ids = 0..grammar.node_kind_count() as u16;
        let flags = ids
            .map(|id| grammar.node_kind_for_id(id).map_or(0, flag))
            .collect();
        Ok(LangParser { parser, flags })
    }
}

struct Scope {
    depth: usize,
    /// The component that calls made in this scope count for.
    comp: usize,
    /// Qualified name that nested definitions are prefixed with.
    prefix: String,
    /// Set when functions defined directly inside are methods of this type.
    methods_of: Option<String>,
}

struct Walker<'a> {
    src: &'a str,
    path: &'a str,
    lang: Lang,
    comps: Vec<Component>,
    links: Links,
    /// Per component, the name of the type it is a method of.
    containers: Vec<Option<String>>,
    scopes: Vec<Scope>,
}

impl LangParser {
    /// `None` only when tree-sitter gives no tree at all.
    pub fn parse(&mut self, path: &str, lang: Lang, src: &str) -> Option<(Vec<Component>, Links)> {
        let tree = self.parser.parse(src, None)?;
        let (comps, links, containers) = (Vec::new(), Links::default(), Vec::new());
        let mut w = Walker {
            src,
            path,
            lang,
            comps,
            links,
            containers,
            scopes: Vec::new(),
        };
        let file_name = path.rsplit('/').next().unwrap_or(path);
        let stem = file_name.split('.').next().unwrap_or(file_name);
        w.push_comp(
            tree.root_node(),
            stem,
            "<module>".into(),
            Kind::Module,
            None,
        );
        w.scopes.push(Scope {
            depth: 0,
            comp: 0,
            prefix: String::new(),
            methods_of: None,
        });

        let jsx = matches!(lang, Lang::JavaScript | Lang::Tsx);
        let (mut cursor, mut depth) = (tree.walk(), 0);
        'walk: loop {
            // The walk is back at or above the depth of the last scope opened: it is closed.
            while w.scopes.len() > 1 && w.scopes.last().is_some_and(|s| s.depth >= depth) {
                w.scopes.pop();
            }
            let node = cursor.node();
            let flags = self
                .flags
                .get(node.kind_id() as usize)
                .copied()
                .unwrap_or(0);
            if flags & VISIT != 0 {
                w.visit(node, depth);
            }
            let marked = || {
                // A list's own leading `(` opens no call.
                let text = w.text(node).as_bytes();
                text.get(1..).is_some_and(|t| t.contains(&b'(')) || (jsx && text.contains(&b'<'))
            };
            if (flags & PRUNE == 0 || marked()) && cursor.goto_first_child() {
                depth += 1;
                continue;
            }
            while !cursor.goto_next_sibling() {
                if !cursor.goto_parent() {
                    break 'walk;
                }
                depth -= 1;
            }
        }
        Some(w.finish())
    }
}

fn unquote(s: &str) -> &str {
    let q = |c: char| c == '"' || c == '\'' || c == '`';
    s.trim().trim_start_matches(q).trim_end_matches(q)
}

fn join(prefix: &str, sep: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}{sep}{name}")
    }
}

impl<'a> Walker<'a> {
    fn text(&self, node: Node) -> &'a str {
        self.src.get(node.byte_range()).unwrap_or("")
    }

    fn field(&self, node: Node, field: &str) -> &'a str {
        node.child_by_field_name(field).map_or("", |n| self.text(n))
    }

    fn top(&self) -> &Scope {
        self.scopes
            .last()
            .expect("the module scope is never closed")
    }

    fn push_comp(
        &mut self,
        node: Node,
        name: &str,
        qualified: String,
        kind: Kind,
        of: Option<String>,
    ) {
        let (start, end) = (node.start_position(), node.end_position());
        let start_line = start.row as u32 + 1;
        // A node ending at column 0 ends with the previous line's newline.
        let end_line = if end.column == 0 && end.row > start.row {
            end.row
        } else {
            end.row + 1
        };
        let mut id = format!("{}::{qualified}@{start_line}", self.path);
        // Two definitions of one name on one line (minified code) still get distinct ids.
        let same_line = self
            .comps
            .iter()
            .rev()
            .take_while(|c| c.start_line == start_line);
        let twins = same_line
            .filter(|c| c.id.split('#').next() == Some(id.as_str()))
            .count();
        if twins > 0 {
            id = format!("{id}#{}", twins + 1);
        }
        self.comps.push(Component {
            id,
            name: name.to_string(),
            qualified_name: qualified,
            kind,
            file: self.path.to_string(),
            start_line,
            end_line: end_line as u32,
            language: self.lang,
        });
        self.containers.push(of);
    }

    /// A definition: a component, and a scope for what is nested in it. A function directly in
    /// a type's scope, or with a receiver (`recv`), is a method of that type.
    fn def(&mut self, node: Node, depth: usize, name: &str, kind: Kind, recv: Option<&str>) {
        if name.is_empty() {
            return;
        }
        let top = self.top();
        let of = match recv {
            Some(r) => Some(r.to_string()),
            None if kind == Kind::Function => top.methods_of.clone(),
            None => None,
        };
        let kind = if of.is_some() { Kind::Method } else { kind };
        let qualified = join(of.as_deref().unwrap_or(&top.prefix), ".", name);
        self.push_comp(node, name, qualified.clone(), kind, of);
        let (comp, methods_of) = (
            self.comps.len() - 1,
            kind.is_type().then(|| name.to_string()),
        );
        self.scopes.push(Scope {
            depth,
            comp,
            prefix: qualified,
            methods_of,
        });
    }

    fn call(&mut self, name: &str) {
        if !name.is_empty() {
            let (comp, start) = (self.top().comp as u32, self.links.names.len() as u32);
            self.links.names.push_str(name);
            let end = self.links.names.len() as u32;
            self.links.calls.push((comp, start, end));
        }
    }

    fn visit(&mut self, node: Node, depth: usize) {
        let kind = match node.kind() {
            "function_definition"
            | "function_declaration"
            | "generator_function_declaration"
            | "method_definition"
            | "function_item" => Kind::Function,
            "class_definition" | "class_declaration" | "abstract_class_declaration" => Kind::Class,
            "struct_item" | "union_item" => Kind::Struct,
            "enum_item" | "enum_declaration" => Kind::Enum,
            "interface_declaration" => Kind::Interface,
            "trait_item" => Kind::Trait,
            other => return self.visit_other(node, depth, other),
        };
        self.def(node, depth, self.field(node, "name"), kind, None);
    }

    fn visit_other(&mut self, node: Node, depth: usize, kind: &str) {
        let imports = match kind {
            "import_statement" | "import_from_statement" if self.lang == Lang::Python => {
                let module = node.child_by_field_name("module_name");
                let module = module.map(|m| self.text(m).replace(char::is_whitespace, ""));
                let mut cursor = node.walk();
                let names = node.children_by_field_name("name", &mut cursor);
                // `from m import x` may import module `m.x`, or a name `x` out of `m`.
                let names = names.map(|n| self.text(n.child_by_field_name("name").unwrap_or(n)));
                let mut specs: Vec<String> = names
                    .map(|n| match module.as_deref() {
                        Some(m) if m.ends_with('.') => format!("{m}{n}"),
                        Some(m) => format!("{m}.{n}"),
                        None => n.to_string(),
                    })
                    .collect();
                specs.extend(module);
                specs
            }
            "import_statement" | "export_statement" | "import_spec" => {
                let field = if kind == "import_spec" {
                    "path"
                } else {
                    "source"
                };
                vec![unquote(self.field(node, field)).to_string()]
            }
            "use_declaration" => {
                let mut specs = Vec::new();
                if let Some(arg) = node.child_by_field_name("argument") {
                    self.rust_use(arg, "", &mut specs);
                }
                specs
            }
            "mod_item" if node.child_by_field_name("body").is_none() => {
                vec![format!("self::{}", self.field(node, "name"))]
            }
            "mod_item" | "impl_item" => {
                // Scopes, not components: `mod m {..}` prefixes names, `impl T` makes methods.
                let top = self.top();
                let (comp, name) = (top.comp, self.field(node, "name"));
                let scope = match self.base_type(node.child_by_field_name("type")) {
                    "" => Scope {
                        depth,
                        comp,
                        prefix: join(&top.prefix, ".", name),
                        methods_of: None,
                    },
                    ty => Scope {
                        depth,
                        comp,
                        prefix: ty.into(),
                        methods_of: Some(ty.into()),
                    },
                };
                self.scopes.push(scope);
                return;
            }
            "method_declaration" => {
                let (name, recv) = (
                    self.field(node, "name"),
                    node.child_by_field_name("receiver"),
                );
                return self.def(
                    node,
                    depth,
                    name,
                    Kind::Function,
                    Some(self.base_type(recv)),
                );
            }
            "type_spec" => {
                let kind = match node.child_by_field_name("type").map(|t| t.kind()) {
                    Some("struct_type") => Kind::Struct,
                    Some("interface_type") => Kind::Interface,
                    _ => return,
                };
                return self.def(node, depth, self.field(node, "name"), kind, None);
            }
            // `const f = () => ..`, and class fields holding a function, are functions by name.
            "variable_declarator" | "field_definition" | "public_field_definition" => {
                let value = node.child_by_field_name("value").map(|v| v.kind());
                let functions = [
                    "arrow_function",
                    "function_expression",
                    "generator_function",
                ];
                let name = node
                    .child_by_field_name("name")
                    .or(node.child_by_field_name("property"));
                let name = name.filter(|n| n.kind().ends_with("identifier"));
                if let (Some(name), true) = (name, value.is_some_and(|v| functions.contains(&v))) {
                    self.def(node, depth, self.text(name), Kind::Function, None);
                }
                return;
            }
            // `<Panel ..>` renders the component `Panel`: a call by name (lowercase is HTML).
            "jsx_opening_element" | "jsx_self_closing_element" => {
                let name = self.callee(node.child_by_field_name("name"));
                if name.starts_with(|c: char| c.is_uppercase()) {
                    self.call(name);
                }
                return;
            }
            "call" | "call_expression" | "new_expression" => {
                let f = node.child_by_field_name("function");
                let f = f.or_else(|| node.child_by_field_name("constructor"));
                let callee = self.callee(f);
                let js = matches!(self.lang, Lang::JavaScript | Lang::TypeScript | Lang::Tsx);
                if !(js && (callee == "require" || f.is_some_and(|f| f.kind() == "import"))) {
                    return self.call(callee);
                }
                let arg = node
                    .child_by_field_name("arguments")
                    .and_then(|a| a.named_child(0));
                let arg = arg.filter(|a| a.kind() == "string");
                arg.map(|a| unquote(self.text(a)).to_string())
                    .into_iter()
                    .collect()
            }
            _ => return,
        };
        self.links
            .imports
            .extend(imports.into_iter().filter(|s| !s.is_empty()));
    }

    /// The called name: a plain identifier, or the last segment of a member/path/field access.
    fn callee(&self, mut node: Option<Node>) -> &'a str {
        while let Some(n) = node {
            node = match n.kind() {
                "identifier" | "field_identifier" | "property_identifier" => return self.text(n),
                "attribute" => n.child_by_field_name("attribute"),
                "member_expression" => n.child_by_field_name("property"),
                "selector_expression" | "field_expression" => n.child_by_field_name("field"),
                "scoped_identifier" => n.child_by_field_name("name"),
                "generic_function" => n.child_by_field_name("function"),
                _ => None,
            };
        }
        ""
    }

    /// `Foo` out of `Foo`, `Foo<T>`, `&mut Foo`, `a::Foo`, and Go's `(f *Foo[T])`.
    fn base_type(&self, mut node: Option<Node>) -> &'a str {
        while let Some(n) = node {
            node = match n.kind() {
                "type_identifier" | "identifier" => return self.text(n),
                "generic_type" | "reference_type" | "parameter_declaration" => {
                    n.child_by_field_name("type")
                }
                "scoped_type_identifier" | "qualified_type" => n.child_by_field_name("name"),
                "parameter_list" => n.named_child(0),
                _ => n.named_child(n.named_child_count().saturating_sub(1)),
            };
        }
        ""
    }

    /// `use a::{b, c::d as e}` gives `a::b`, `a::c::d`.
    fn rust_use(&self, node: Node, prefix: &str, out: &mut Vec<String>) {
        let path = match node.kind() {
            "scoped_use_list" | "use_list" => {
                let prefix = join(prefix, "::", self.field(node, "path"));
                let prefix = prefix.trim_end_matches("::");
                let list = node.child_by_field_name("list").unwrap_or(node);
                for i in 0..list.named_child_count() {
                    if let Some(c) = list.named_child(i) {
                        self.rust_use(c, prefix, out);
                    }
                }
                return;
            }
            "use_as_clause" => self.field(node, "path"),
            _ => self.text(node).trim_end_matches("::*"),
        };
        out.push(join(prefix, "::", path));
    }

    /// Links each method to its type in this file: the innermost one containing it, else the
    /// first of that name (an `impl` or Go method apart from its type).
    fn finish(mut self) -> (Vec<Component>, Links) {
        let comps = &self.comps;
        let mut types: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, c) in comps.iter().enumerate().filter(|(_, c)| c.kind.is_type()) {
            types.entry(&c.name).or_default().push(i);
        }
        let contains = |t: usize, m: &Component| {
            comps[t].start_line <= m.start_line && m.end_line <= comps[t].end_line
        };
        self.links.parents = (self.containers.iter().zip(comps))
            .map(|(of, m)| {
                let candidates = types.get(of.as_deref()?)?;
                let inner = candidates.iter().rfind(|t| contains(**t, m));
                inner.or(candidates.first()).map(|t| *t as u32)
            })
            .collect();
        let Links { calls, names, .. } = &mut self.links;
        let key =
            |&(comp, start, end): &(u32, u32, u32)| (comp, &names[start as usize..end as usize]);
        calls.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
        calls.dedup_by(|a, b| key(a) == key(b));
        (self.comps, self.links)
    }
}
