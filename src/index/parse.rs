//! One tree-sitter walk per file turns its syntax tree into components, call names and imports.
//!
//! A hand-written cursor walk rather than Queries: it visits each node once, and a per-grammar
//! table of kind ids lets it skip the uninteresting ones without touching their kind name.

use tree_sitter::{Node, Parser};

use super::{Component, IndexError, Kind, Lang};

#[derive(Default)]
pub(super) struct Parsed {
    /// The module first, then the rest in source order.
    pub components: Vec<Component>,
    /// Per component, the type component (same file) a method belongs to.
    pub parents: Vec<Option<u32>>,
    /// Per component, the distinct names it calls.
    pub calls: Vec<Vec<Box<str>>>,
    /// Raw specifiers, resolved to files once all files are parsed.
    pub imports: Vec<String>,
}

/// One parser per language, made on first use, so an unloadable grammar only fails the runs that
/// meet a file of its language.
#[derive(Default)]
pub(super) struct Parsers {
    slots: [Option<LangParser>; 6],
}

pub(super) struct LangParser {
    parser: Parser,
    /// Indexed by node kind id: does the walk look at this node?
    interesting: Vec<bool>,
}

const PY: &[&str] = &[
    "function_definition",
    "class_definition",
    "call",
    "import_statement",
    "import_from_statement",
];
const JS: &[&str] = &[
    "function_declaration",
    "generator_function_declaration",
    "class_declaration",
    "abstract_class_declaration",
    "interface_declaration",
    "enum_declaration",
    "method_definition",
    "variable_declarator",
    "field_definition",
    "public_field_definition",
    "call_expression",
    "new_expression",
    "import_statement",
    "export_statement",
];
const RS: &[&str] = &[
    "function_item",
    "struct_item",
    "union_item",
    "enum_item",
    "trait_item",
    "impl_item",
    "mod_item",
    "call_expression",
    "use_declaration",
];
const GO: &[&str] = &[
    "function_declaration",
    "method_declaration",
    "type_spec",
    "call_expression",
    "import_spec",
];

impl Parsers {
    pub fn get(&mut self, lang: Lang) -> Result<&mut LangParser, IndexError> {
        let slot = &mut self.slots[lang as usize];
        if slot.is_none() {
            let grammar = lang.grammar();
            let mut parser = Parser::new();
            parser
                .set_language(&grammar)
                .map_err(|e| IndexError::Unavailable {
                    module: lang.module().into(),
                    reason: e.to_string(),
                })?;
            let kinds = match lang {
                Lang::Python => PY,
                Lang::JavaScript | Lang::TypeScript | Lang::Tsx => JS,
                Lang::Rust => RS,
                Lang::Go => GO,
            };
            // By name over every id: a kind can have several ids (aliases).
            let interesting = (0..grammar.node_kind_count() as u16)
                .map(|id| {
                    grammar
                        .node_kind_for_id(id)
                        .is_some_and(|k| kinds.contains(&k))
                })
                .collect();
            *slot = Some(LangParser {
                parser,
                interesting,
            });
        }
        Ok(slot.as_mut().expect("filled just above"))
    }
}

struct Scope {
    depth: usize,
    /// The component that calls made in this scope are attributed to.
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
    out: Parsed,
    containers: Vec<Option<String>>,
    scopes: Vec<Scope>,
}

impl LangParser {
    /// `None` only when tree-sitter gives no tree at all.
    pub fn parse(&mut self, path: &str, lang: Lang, src: &str) -> Option<Parsed> {
        let tree = self.parser.parse(src, None)?;
        let root = tree.root_node();
        let mut w = Walker {
            src,
            path,
            lang,
            out: Parsed::default(),
            containers: Vec::new(),
            scopes: Vec::new(),
        };
        let stem = path.rsplit('/').next().unwrap_or(path);
        let stem = stem.split_once('.').map_or(stem, |(s, _)| s);
        w.push_comp(root, stem, "<module>".into(), Kind::Module, None);
        w.scopes.push(Scope {
            depth: 0,
            comp: 0,
            prefix: String::new(),
            methods_of: None,
        });

        let mut cursor = tree.walk();
        let mut depth = 0;
        'walk: loop {
            let node = cursor.node();
            // The previous node's subtree is done once the walk is back at its depth or above.
            while w.scopes.len() > 1 && w.scopes.last().is_some_and(|s| s.depth >= depth) {
                w.scopes.pop();
            }
            if self.interesting.get(node.kind_id() as usize) == Some(&true) {
                w.visit(node, depth);
            }
            if cursor.goto_first_child() {
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

fn end_line(node: Node) -> u32 {
    let (s, e) = (node.start_position(), node.end_position());
    // A node ending at column 0 ends with the previous line's newline.
    if e.column == 0 && e.row > s.row {
        e.row as u32
    } else {
        e.row as u32 + 1
    }
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    let q = |c: char| c == '"' || c == '\'' || c == '`';
    s.strip_prefix(q)
        .and_then(|s| s.strip_suffix(q))
        .unwrap_or(s)
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

    fn field(&self, node: Node, field: &str) -> Option<&'a str> {
        node.child_by_field_name(field).map(|n| self.text(n))
    }

    fn push_comp(
        &mut self,
        node: Node,
        name: &str,
        qualified: String,
        kind: Kind,
        container: Option<String>,
    ) -> usize {
        let start_line = node.start_position().row as u32 + 1;
        let mut id = format!("{}::{qualified}@{start_line}", self.path);
        // Two definitions of one name on one line (minified code) still get distinct ids.
        let same_line = self
            .out
            .components
            .iter()
            .rev()
            .take_while(|c| c.start_line == start_line);
        let dups = same_line
            .filter(|c| c.id.split('#').next() == Some(id.as_str()))
            .count();
        if dups > 0 {
            id = format!("{id}#{}", dups + 1);
        }
        self.out.components.push(Component {
            id,
            name: name.to_string(),
            qualified_name: qualified,
            kind,
            file: self.path.to_string(),
            start_line,
            end_line: end_line(node).max(start_line),
            language: self.lang,
        });
        self.out.calls.push(Vec::new());
        self.containers.push(container);
        self.out.components.len() - 1
    }

    /// A definition: a component, and a scope for what is nested in it.
    fn def(&mut self, node: Node, depth: usize, name: &str, kind: Kind, recv: Option<&str>) {
        if name.is_empty() {
            return;
        }
        let top = self
            .scopes
            .last()
            .expect("the module scope is never popped");
        let container = match (kind, recv) {
            (Kind::Function, Some(r)) => Some(r.to_string()),
            (Kind::Function, None) => top.methods_of.clone(),
            _ => None,
        };
        let kind = if container.is_some() {
            Kind::Method
        } else {
            kind
        };
        let prefix = container.as_deref().unwrap_or(&top.prefix);
        let qualified = join(prefix, ".", name);
        let comp = self.push_comp(node, name, qualified.clone(), kind, container);
        let methods_of = kind.is_type().then(|| name.to_string());
        self.scopes.push(Scope {
            depth,
            comp,
            prefix: qualified,
            methods_of,
        });
    }

    fn call(&mut self, name: &str) {
        if name.is_empty() {
            return;
        }
        let comp = self
            .scopes
            .last()
            .expect("the module scope is never popped")
            .comp;
        let calls = &mut self.out.calls[comp];
        if !calls.iter().any(|c| &**c == name) {
            calls.push(name.into());
        }
    }

    fn visit(&mut self, node: Node, depth: usize) {
        let name = || self.field(node, "name").unwrap_or("");
        match (self.lang, node.kind()) {
            (Lang::Python, "function_definition") => {
                self.def(node, depth, name(), Kind::Function, None)
            }
            (Lang::Python, "class_definition") => self.def(node, depth, name(), Kind::Class, None),
            (Lang::Python, "call") => {
                let callee = self.callee(node.child_by_field_name("function"));
                self.call(callee);
            }
            (Lang::Python, "import_statement" | "import_from_statement") => {
                let module = self
                    .field(node, "module_name")
                    .map(|m| m.replace(char::is_whitespace, ""));
                let mut cursor = node.walk();
                for n in node.children_by_field_name("name", &mut cursor) {
                    let n = if n.kind() == "aliased_import" {
                        n.child_by_field_name("name")
                    } else {
                        Some(n)
                    };
                    let n = n.map_or("", |n| self.text(n));
                    self.out.imports.push(match &module {
                        Some(m) if m.ends_with('.') => format!("{m}{n}"),
                        Some(m) => format!("{m}.{n}"),
                        None => n.to_string(),
                    });
                }
                self.out.imports.extend(module);
            }
            (Lang::Rust, "function_item") => self.def(node, depth, name(), Kind::Function, None),
            (Lang::Rust, "struct_item" | "union_item") => {
                self.def(node, depth, name(), Kind::Struct, None)
            }
            (Lang::Rust, "enum_item") => self.def(node, depth, name(), Kind::Enum, None),
            (Lang::Rust, "trait_item") => self.def(node, depth, name(), Kind::Trait, None),
            (Lang::Rust, "impl_item") => {
                let ty = self.base_type(node.child_by_field_name("type")).to_string();
                let comp = self.scopes.last().expect("module scope").comp;
                self.scopes.push(Scope {
                    depth,
                    comp,
                    prefix: ty.clone(),
                    methods_of: Some(ty),
                });
            }
            (Lang::Rust, "mod_item") => {
                let n = name();
                let top = self.scopes.last().expect("module scope");
                if node.child_by_field_name("body").is_some() {
                    let (comp, prefix) = (top.comp, join(&top.prefix, ".", n));
                    self.scopes.push(Scope {
                        depth,
                        comp,
                        prefix,
                        methods_of: None,
                    });
                } else {
                    self.out.imports.push(format!("self::{n}"));
                }
            }
            (Lang::Rust, "use_declaration") => {
                if let Some(arg) = node.child_by_field_name("argument") {
                    self.rust_use(arg, "");
                }
            }
            (Lang::Go, "function_declaration") => {
                self.def(node, depth, name(), Kind::Function, None)
            }
            (Lang::Go, "method_declaration") => {
                let recv = self.base_type(node.child_by_field_name("receiver"));
                self.def(node, depth, name(), Kind::Function, Some(recv));
            }
            (Lang::Go, "type_spec") => match node.child_by_field_name("type").map(|t| t.kind()) {
                Some("struct_type") => self.def(node, depth, name(), Kind::Struct, None),
                Some("interface_type") => self.def(node, depth, name(), Kind::Interface, None),
                _ => {}
            },
            (Lang::Go, "import_spec") => {
                let path = self.field(node, "path").map(unquote).unwrap_or("");
                self.out.imports.push(path.to_string());
            }
            (Lang::Rust | Lang::Go, "call_expression") => {
                let callee = self.callee(node.child_by_field_name("function"));
                self.call(callee);
            }
            (_, kind) => self.visit_js(node, depth, kind),
        }
    }

    fn visit_js(&mut self, node: Node, depth: usize, kind: &str) {
        let name = || self.field(node, "name").unwrap_or("");
        match kind {
            "function_declaration" | "generator_function_declaration" | "method_definition" => {
                self.def(node, depth, name(), Kind::Function, None)
            }
            "class_declaration" | "abstract_class_declaration" => {
                self.def(node, depth, name(), Kind::Class, None)
            }
            "interface_declaration" => self.def(node, depth, name(), Kind::Interface, None),
            "enum_declaration" => self.def(node, depth, name(), Kind::Enum, None),
            // `const f = () => ..`, and class fields holding a function, are functions by name.
            "variable_declarator" | "field_definition" | "public_field_definition" => {
                let value = node.child_by_field_name("value").map(|v| v.kind());
                if matches!(
                    value,
                    Some(
                        "arrow_function"
                            | "function_expression"
                            | "function"
                            | "generator_function"
                    )
                ) {
                    let n = node
                        .child_by_field_name("name")
                        .or(node.child_by_field_name("property"));
                    if let Some(n) = n.filter(|n| n.kind().ends_with("identifier")) {
                        let n = self.text(n);
                        self.def(node, depth, n, Kind::Function, None);
                    }
                }
            }
            "call_expression" => {
                let f = node.child_by_field_name("function");
                let callee = self.callee(f);
                if callee == "require" || f.is_some_and(|f| f.kind() == "import") {
                    let arg = node
                        .child_by_field_name("arguments")
                        .and_then(|a| a.named_child(0));
                    if let Some(a) = arg.filter(|a| a.kind() == "string") {
                        let spec = unquote(self.text(a)).to_string();
                        self.out.imports.push(spec);
                    }
                } else {
                    self.call(callee);
                }
            }
            "new_expression" => {
                let callee = self.callee(node.child_by_field_name("constructor"));
                self.call(callee);
            }
            "import_statement" | "export_statement" => {
                if let Some(s) = self.field(node, "source") {
                    self.out.imports.push(unquote(s).to_string());
                }
            }
            _ => {}
        }
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

    /// `Foo` out of `Foo`, `Foo<T>`, `&mut Foo`, `a::Foo`, `(f *Foo[T])`.
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

    fn rust_use(&mut self, node: Node, prefix: &str) {
        match node.kind() {
            "scoped_use_list" => {
                let path = join(prefix, "::", self.field(node, "path").unwrap_or(""));
                if let Some(list) = node.child_by_field_name("list") {
                    self.rust_use(list, &path);
                }
            }
            "use_list" => {
                for i in 0..node.named_child_count() {
                    if let Some(c) = node.named_child(i) {
                        self.rust_use(c, prefix);
                    }
                }
            }
            "use_as_clause" => {
                let path = self.field(node, "path").unwrap_or("");
                self.out.imports.push(join(prefix, "::", path));
            }
            _ => {
                let path = self.text(node).trim_end_matches("::*");
                self.out.imports.push(join(prefix, "::", path));
            }
        }
    }

    /// Links each method to its type in this file: the innermost one containing it, else any.
    fn finish(mut self) -> Parsed {
        let comps = &self.out.components;
        self.out.parents = self
            .containers
            .iter()
            .zip(comps)
            .map(|(container, m)| {
                let ty = container.as_deref()?;
                let types = comps
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.kind.is_type() && c.name == ty);
                let inside = |(_, c): &(usize, &Component)| {
                    c.start_line <= m.start_line && m.end_line <= c.end_line
                };
                let types: Vec<_> = types.collect();
                let best = types
                    .iter()
                    .copied()
                    .filter(inside)
                    .next_back()
                    .or(types.first().copied());
                best.map(|(i, _)| i as u32)
            })
            .collect();
        self.out
    }
}
