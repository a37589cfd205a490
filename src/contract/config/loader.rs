//! Resolving a configuration as written: each contract's `extends` chain, its keys merged
//! over the base, validated; then the routes registered and the names checked.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use http::Method;
use serde_json::Value;

use super::MAX_EXTENDS_DEPTH;
use super::error::{ConfigError, ConfigErrorKind};
use super::key_segment;
use super::spec::{ContractSpec, DefaultSpec, RouteSpec, read_spec};
use crate::contract::profiles;
use crate::contract::registry::{Contracts, Target};
use crate::contract::rules::Rule;
use crate::contract::{Contract, ContractRef};

/// The loader's working state.
struct Loader<'a> {
    origin: &'a str,
    tables: &'a BTreeMap<String, ContractSpec>,
    resolved: HashMap<String, Resolved>,
    /// Contracts named by routes (or `default`), with their reference computed once: thousands
    /// of routes usually share a few contracts, and hashing each would dominate loading.
    shared: HashMap<String, (Arc<Contract>, ContractRef)>,
}

/// A contract of the file, resolved, with what the checks need to know about it.
#[derive(Clone)]
struct Resolved {
    contract: Arc<Contract>,
    /// Whether it descends from the built-in `aws-ec2` profile.
    ec2: bool,
    /// How many contracts of the file its `extends` chain holds, itself included (0 for a
    /// built-in profile).
    depth: usize,
    /// The contract of the file it extends, if any.
    parent: Option<String>,
}

/// What a contract table starts from.
enum Base<'a> {
    /// Another contract of the file (its table key).
    File(&'a str),
    /// A built-in profile, or the conservative default when `extends` is absent.
    Builtin(Resolved),
}

/// Reads the parsed text, resolves and validates every contract of the file, and registers the
/// routes: a configuration is checked whole, routed contracts or not.
pub(super) fn build(root: Value, origin: &str) -> Result<Contracts, ConfigError> {
    let spec = read_spec(root, origin)?;
    let (route_key, routes) = route_list(spec.route, spec.routes, origin)?;
    let mut loader = Loader {
        origin,
        tables: &spec.contracts,
        resolved: HashMap::new(),
        shared: HashMap::new(),
    };
    // Every contract of the file is resolved and validated, routed or not.
    for name in spec.contracts.keys() {
        loader.resolve_named(name, &contract_path(name))?;
    }

    // Where each used contract came from, for the duplicate-name check.
    let mut used: Vec<(String, Arc<Contract>)> = Vec::new();
    let default = loader.default_contract(spec.default.as_ref())?;
    used.push(("default".to_owned(), Arc::clone(&default)));
    let contracts = Contracts::new(Arc::unwrap_or_clone(default));
    let contracts = loader.add_routes(contracts, route_key, routes, &mut used)?;
    check_names(&used, origin)?;
    Ok(contracts)
}

/// The routes, under the key they were given as (`route`, or `routes`; not both).
fn route_list(
    route: Option<Vec<RouteSpec>>,
    routes: Option<Vec<RouteSpec>>,
    origin: &str,
) -> Result<(&'static str, Vec<RouteSpec>), ConfigError> {
    match (route, routes) {
        (Some(_), Some(_)) => Err(ConfigError::new(
            origin,
            "routes",
            ConfigErrorKind::Invalid("give `route` or `routes`, not both".into()),
        )),
        (Some(r), None) => Ok(("route", r)),
        (None, r) => Ok(("routes", r.unwrap_or_default())),
    }
}

/// A route's target (`path`: the route's key path, for errors), validated.
fn route_target(
    host: String,
    path_prefix: Option<String>,
    method: Option<String>,
    path: &str,
    origin: &str,
) -> Result<Target, ConfigError> {
    let err = |key: &str, kind| ConfigError::new(origin, key, kind);
    let mut target = Target::host(host);
    if let Some(prefix) = path_prefix {
        target = target.path_prefix(prefix);
    }
    if let Some(method) = method {
        let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).map_err(|e| {
            err(
                &format!("{path}.method"),
                ConfigErrorKind::Invalid(e.to_string()),
            )
        })?;
        target = target.method(method);
    }
    target
        .validate()
        .map_err(|why| err(&format!("{path}.host"), ConfigErrorKind::InvalidTarget(why)))?;
    Ok(target)
}

/// Recovery finds the frozen contract by name: one name, one contract. Each against the first
/// of its name: the same first error as comparing every pair, in linear time.
fn check_names(used: &[(String, Arc<Contract>)], origin: &str) -> Result<(), ConfigError> {
    let mut first: HashMap<&str, &Arc<Contract>> = HashMap::new();
    for (key, a) in used {
        let b = *first.entry(a.name.as_str()).or_insert(a);
        if !Arc::ptr_eq(a, b) && **a != **b {
            return Err(ConfigError::new(
                origin,
                key,
                ConfigErrorKind::DuplicateName(a.name.clone()),
            ));
        }
    }
    Ok(())
}

impl<'a> Loader<'a> {
    fn err(&self, key: &str, kind: ConfigErrorKind) -> ConfigError {
        ConfigError::new(self.origin, key, kind)
    }

    /// The contract for requests no route matches: `default` as a name or a table, else the
    /// conservative profile.
    fn default_contract(
        &mut self,
        default: Option<&'a DefaultSpec>,
    ) -> Result<Arc<Contract>, ConfigError> {
        Ok(match default {
            None => Arc::new(profiles::conservative()),
            Some(DefaultSpec::Name(name)) => self.by_reference(name, "default")?.0,
            Some(DefaultSpec::Table(table)) => {
                self.resolve_table(table, "default", "default")?.contract
            }
        })
    }

    /// Registers each route with the contract it names (shared between routes naming the same
    /// one); a second route with the same target is refused. `used` gains each route's contract.
    fn add_routes(
        &mut self,
        mut contracts: Contracts,
        route_key: &str,
        routes: Vec<RouteSpec>,
        used: &mut Vec<(String, Arc<Contract>)>,
    ) -> Result<Contracts, ConfigError> {
        // Each target's first route, for the duplicate check (a scan per route was quadratic).
        let mut targets: HashMap<Target, usize> = HashMap::with_capacity(routes.len());
        for (i, route) in routes.into_iter().enumerate() {
            let path = format!("{route_key}[{i}]");
            let RouteSpec {
                host,
                path_prefix,
                method,
                contract,
            } = route;
            let target = route_target(host, path_prefix, method, &path, self.origin)?;
            if let Some(&j) = targets.get(&target) {
                return Err(self.err(&path, ConfigErrorKind::DuplicateRoute(j)));
            }
            let contract_key = format!("{path}.contract");
            let (contract, reference) = self.by_reference(&contract, &contract_key)?;
            used.push((contract_key, Arc::clone(&contract)));
            targets.insert(target.clone(), i);
            contracts = contracts.route_shared(target, contract, reference);
        }
        Ok(contracts)
    }

    /// A contract named by a route or `default`: the file's, else a built-in profile; shared
    /// between the routes that name it, with its reference.
    fn by_reference(
        &mut self,
        name: &str,
        key: &str,
    ) -> Result<(Arc<Contract>, ContractRef), ConfigError> {
        if let Some(done) = self.shared.get(name) {
            return Ok(done.clone());
        }
        let contract = if self.tables.contains_key(name) {
            self.resolve_named(name, &contract_path(name))?.contract
        } else {
            builtin(name)
                .ok_or_else(|| self.err(key, unknown_contract(name)))?
                .contract
        };
        let out = (Arc::clone(&contract), contract.reference());
        self.shared.insert(name.to_owned(), out.clone());
        Ok(out)
    }

    /// What a table starts from: its `extends`, without resolving a parent.
    fn base(
        &self,
        table: &'a ContractSpec,
        own_name: &str,
        path: &str,
    ) -> Result<Base<'a>, ConfigError> {
        let Some(parent) = &table.extends else {
            return Ok(Base::Builtin(Resolved {
                contract: Arc::new(profiles::conservative()),
                ec2: false,
                depth: 0,
                parent: None,
            }));
        };
        let key = format!("{path}.extends");
        let tables: &'a BTreeMap<String, ContractSpec> = self.tables;
        if parent != own_name
            && let Some((name, _)) = tables.get_key_value(parent)
        {
            return Ok(Base::File(name));
        }
        match builtin(parent) {
            Some(b) => Ok(Base::Builtin(b)),
            // `[contracts.a] extends = "a"` with no built-in `a`: say so, not "no contract a".
            None if parent == own_name => Err(self.err(
                &key,
                ConfigErrorKind::ExtendsItself {
                    name: parent.clone(),
                    builtin: profiles::NAMES.join(", "),
                },
            )),
            None => Err(self.err(&key, unknown_contract(parent))),
        }
    }

    /// Resolves the file's contract `name` (`path`: the key that named it, for errors).
    ///
    /// Iterative: it walks the `extends` chain down to a resolved contract or a built-in, then
    /// builds from the bottom up, so a long chain cannot overflow the stack; a walk longer than
    /// [`MAX_EXTENDS_DEPTH`] stops with an error. Every contract is resolved once, so loading
    /// is linear in the number of contracts.
    fn resolve_named(&mut self, name: &str, path: &str) -> Result<Resolved, ConfigError> {
        if let Some(done) = self.resolved.get(name) {
            return Ok(done.clone());
        }
        let tables: &'a BTreeMap<String, ContractSpec> = self.tables;
        let mut chain: Vec<(String, &'a ContractSpec)> = Vec::new();
        let mut cur = name.to_owned();
        let mut named_at = path.to_owned();
        loop {
            let Some(table) = tables.get(&cur) else {
                return Err(self.err(&named_at, unknown_contract(&cur)));
            };
            let own = contract_path(&cur);
            let base = self.base(table, &cur, &own)?;
            chain.push((cur, table));
            let Base::File(parent) = base else { break };
            if self.resolved.contains_key(parent) {
                break;
            }
            if let Some(start) = chain.iter().position(|(n, _)| n == parent) {
                let mut cycle: Vec<String> =
                    chain[start..].iter().map(|(n, _)| n.clone()).collect();
                cycle.push(parent.to_owned());
                let key = format!("{}.extends", contract_path(&chain[start].0));
                return Err(self.err(&key, ConfigErrorKind::Cycle(cycle)));
            }
            if chain.len() > MAX_EXTENDS_DEPTH {
                let mut names: Vec<String> = chain.into_iter().map(|(n, _)| n).collect();
                names.truncate(MAX_EXTENDS_DEPTH + 1);
                return Err(self.err(
                    &format!("{}.extends", contract_path(name)),
                    ConfigErrorKind::ExtendsTooDeep {
                        chain: names,
                        limit: MAX_EXTENDS_DEPTH,
                    },
                ));
            }
            named_at = format!("{own}.extends");
            cur = parent.to_owned();
        }
        for (n, table) in chain.iter().rev() {
            let out = self.resolve_table(table, n, &contract_path(n))?;
            self.resolved.insert(n.clone(), out);
        }
        self.resolved
            .get(name)
            .cloned()
            .ok_or_else(|| self.err(path, unknown_contract(name)))
    }

    /// Builds one contract table: base from `extends`, then the keys it sets. A parent of the
    /// file must already be resolved (or be resolvable without recursion: `default`).
    fn resolve_table(
        &mut self,
        table: &'a ContractSpec,
        own_name: &str,
        path: &str,
    ) -> Result<Resolved, ConfigError> {
        let at = |k: &str| format!("{path}.{k}");

        let (base, parent) = match self.base(table, own_name, path)? {
            Base::Builtin(b) => (b, None),
            Base::File(parent) => (self.resolve_named(parent, &at("extends"))?, Some(parent)),
        };
        let depth = base.depth + 1;
        if depth > MAX_EXTENDS_DEPTH {
            return Err(self.too_deep(own_name, parent, &at("extends")));
        }
        let mut c = Arc::unwrap_or_clone(base.contract);
        c.name = table.name.clone().unwrap_or_else(|| own_name.to_owned());
        replace_keys(&mut c, table);
        add_secrets(&mut c, table);
        let merged = self.merge_rules(&mut c, table, path)?;
        c.validate().map_err(|e| {
            let key = merged.key_of(e.field(), path);
            self.err(&key, ConfigErrorKind::Contract(e.kind().clone()))
        })?;
        let ec2 = base.ec2;
        if ec2 {
            self.check_ec2_scope(&c, &at("digest"))?;
        }
        Ok(Resolved {
            contract: Arc::new(c),
            ec2,
            depth,
            parent: parent.map(str::to_owned),
        })
    }

    /// The error for a chain deeper than [`MAX_EXTENDS_DEPTH`], naming the chain from `own_name`
    /// down, through the parents already resolved.
    fn too_deep(&self, own_name: &str, parent: Option<&str>, key: &str) -> ConfigError {
        let mut chain = vec![own_name.to_owned()];
        let mut next = parent.map(str::to_owned);
        while let Some(n) = next.filter(|_| chain.len() <= MAX_EXTENDS_DEPTH) {
            next = self.resolved.get(&n).and_then(|r| r.parent.clone());
            chain.push(n);
        }
        self.err(
            key,
            ConfigErrorKind::ExtendsTooDeep {
                chain,
                limit: MAX_EXTENDS_DEPTH,
            },
        )
    }

    /// Puts the table's `extra_rules` before the rules, which the table's `rules` replace when
    /// given. Each rule's own checks come first, so an error names the rule and the key that set
    /// it.
    fn merge_rules(
        &self,
        c: &mut Contract,
        table: &ContractSpec,
        path: &str,
    ) -> Result<MergedRules, ConfigError> {
        let own_rules = match &table.rules {
            Some(r) => Some(self.rules(r, &format!("{path}.rules"))?),
            None => None,
        };
        let extra = self.rules(&table.extra_rules, &format!("{path}.extra_rules"))?;
        let has_own_rules = own_rules.is_some();
        if let Some(r) = own_rules {
            c.rules = r;
        }
        let extra_len = extra.len();
        c.rules.splice(0..0, extra);
        Ok(MergedRules {
            extra_len,
            has_own_rules,
        })
    }

    /// An `aws-ec2` contract's field digest must keep the zone in the operation identity.
    fn check_ec2_scope(&self, c: &Contract, key: &str) -> Result<(), ConfigError> {
        let missing = profiles::ec2_scope_missing(&c.digest);
        if missing.is_empty() {
            return Ok(());
        }
        Err(self.err(
            key,
            ConfigErrorKind::Ec2ScopeMissing(missing.iter().map(|s| (*s).to_owned()).collect()),
        ))
    }

    /// A list of rules, each checked on its own (status range, header name, pointers) so that
    /// an error names the rule: `path[i]`.
    fn rules(&self, rules: &[Rule], path: &str) -> Result<Vec<Rule>, ConfigError> {
        for (i, rule) in rules.iter().enumerate() {
            profiles::conservative()
                .rule(rule.clone())
                .validate()
                .map_err(|e| {
                    let rest = e.field().strip_prefix("rules[0]").unwrap_or("");
                    self.err(
                        &format!("{path}[{i}]{rest}"),
                        ConfigErrorKind::Contract(e.kind().clone()),
                    )
                })?;
        }
        Ok(rules.to_vec())
    }
}

/// Each key the table sets replaces the inherited value as a whole.
fn replace_keys(c: &mut Contract, table: &ContractSpec) {
    if let Some(v) = &table.key {
        c.key = v.clone();
    }
    if let Some(v) = table.max_key_len {
        c.max_key_len = v;
    }
    if let Some(v) = table.replay {
        c.replay = v;
    }
    if let Some(v) = table.replay_supplies_body_secrets {
        c.replay_supplies_body_secrets = v;
    }
    if let Some(v) = table.replay_supplies_path_secrets {
        c.replay_supplies_path_secrets = v;
    }
    if let Some(v) = &table.digest {
        c.digest = v.clone();
    }
    if table.retention_secs.is_some() {
        c.retention_secs = table.retention_secs;
    }
    if table.settle_secs.is_some() {
        c.settle_secs = table.settle_secs;
    }
    if table.keep_details_secs.is_some() {
        c.keep_details_secs = table.keep_details_secs;
    }
    if table.keep_identity_secs.is_some() {
        c.keep_identity_secs = table.keep_identity_secs;
    }
    if table.remote_ref.is_some() {
        c.remote_ref.clone_from(&table.remote_ref);
    }
    if table.lookup.is_some() {
        c.lookup.clone_from(&table.lookup);
    }
}

/// Secrets only ever accumulate: an override cannot make a secret stored again. Names compare
/// case-insensitively, fields and templates exactly.
fn add_secrets(c: &mut Contract, table: &ContractSpec) {
    for (dst, add) in [
        (&mut c.secret_headers, &table.secret_headers),
        (&mut c.secret_query_params, &table.secret_query_params),
    ] {
        for s in add {
            if !dst.iter().any(|d| d.eq_ignore_ascii_case(s)) {
                dst.push(s.clone());
            }
        }
    }
    for (dst, add) in [
        (&mut c.secret_body_fields, &table.secret_body_fields),
        (&mut c.secret_response_fields, &table.secret_response_fields),
        (&mut c.secret_path_segments, &table.secret_path_segments),
    ] {
        for f in add {
            if !dst.contains(f) {
                dst.push(f.clone());
            }
        }
    }
}

/// How a table's rules were merged: what maps a merged rule back to the key that set it.
struct MergedRules {
    /// How many `extra_rules` lead the merged list.
    extra_len: usize,
    /// Whether the table gave `rules` (else the rules after the extra ones are inherited).
    has_own_rules: bool,
}

impl MergedRules {
    /// The key path of a validation error's `field`: `rules[j]` of the merged list back to the
    /// `extra_rules` or `rules` entry that set it, anything else under the table's `path`.
    fn key_of(&self, field: &str, path: &str) -> String {
        match field
            .strip_prefix("rules[")
            .and_then(|r| r.split_once(']'))
            .and_then(|(n, rest)| Some((n.parse::<usize>().ok()?, rest)))
        {
            Some((j, rest)) if j < self.extra_len => format!("{path}.extra_rules[{j}]{rest}"),
            Some((j, rest)) if self.has_own_rules => {
                format!("{path}.rules[{}]{rest}", j - self.extra_len)
            }
            _ if field.is_empty() => path.to_owned(),
            _ => format!("{path}.{field}"),
        }
    }
}

/// A built-in profile, with its lineage.
fn builtin(name: &str) -> Option<Resolved> {
    profiles::by_name(name).map(|contract| Resolved {
        contract: Arc::new(contract),
        ec2: name == "aws-ec2",
        depth: 0,
        parent: None,
    })
}

/// `contracts.<name>`, the key path of a contract table.
fn contract_path(name: &str) -> String {
    format!("contracts.{}", key_segment(name))
}

fn unknown_contract(name: &str) -> ConfigErrorKind {
    ConfigErrorKind::UnknownContract {
        name: name.to_owned(),
        builtin: profiles::NAMES.join(", "),
    }
}
