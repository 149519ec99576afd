// seawall's incident dashboard. Served by the admin router under a strict
// Content-Security-Policy: no inline script or style, no eval, no storage. The
// admin token lives in one variable of this closure, never in the URL or storage.
"use strict";

(() => {
  // ---------------------------------------------------------------------------
  // What the page reads. Every field of the stream (and of the answers to
  // changes) that the page uses is listed here by path, "[]" walking into an
  // array's items; the tests in src/admin/dashboard.rs resolve each path in
  // frames built from real layers, and check that nothing else is read, so the
  // page and the API cannot drift apart.
  const FRAME = {
    instance: "instance",
    intervalMs: "interval_ms",
    changesAllowed: "changes_allowed",
    generation: "generation",
    asStarted: "as_started",
    file: "file",
    policies: "policies",
  };
  const POLICY = {
    name: "name",
    routes: "routes",
    dependencies: "dependencies",
    levels: "levels",
    changed: "snapshot.changed_at_run_time",
    breaker: "snapshot.breaker",
    breakerState: "snapshot.breaker.state",
    breakerInState: "snapshot.breaker.in_state_for",
    breakerRetryAfter: "snapshot.breaker.retry_after",
    breakerOpenSpell: "snapshot.breaker.open_spell",
    breakerWindowCalls: "snapshot.breaker.window.calls",
    breakerWindowFailures: "snapshot.breaker.window.failures",
    breakerConsecutive: "snapshot.breaker.consecutive_failures",
    breakerFailedProbes: "snapshot.breaker.consecutive_failed_probes",
    breakerProbesInFlight: "snapshot.breaker.probes_in_flight",
    breakerCalls: "snapshot.breaker.counters.calls",
    breakerFailures: "snapshot.breaker.counters.failures",
    breakerShortCircuited: "snapshot.breaker.counters.short_circuited",
    breakerShadow: "snapshot.breaker.shadow",
    breakerShadowRejections: "snapshot.breaker.counters.shadow_rejections",
    lastBreakerFrom: "last.breaker.from",
    lastBreakerTo: "last.breaker.to",
    lastBreakerCause: "last.breaker.cause",
    lastBreakerAgo: "last.breaker.ago_ms",
    lastBreakerRehearsal: "last.breaker.rehearsal",
    bulkhead: "snapshot.bulkhead",
    bulkheadActive: "snapshot.bulkhead.active",
    bulkheadMaxConcurrent: "snapshot.bulkhead.max_concurrent",
    bulkheadQueued: "snapshot.bulkhead.queued",
    bulkheadMaxQueue: "snapshot.bulkhead.queue.max_queue",
    bulkheadRejectedFull: "snapshot.bulkhead.rejected_full",
    bulkheadRejectedTimeout: "snapshot.bulkhead.rejected_timeout",
    bulkheadWaitP99: "snapshot.bulkhead.wait.p99",
    bulkheadShadow: "snapshot.bulkhead.shadow",
    bulkheadShadowFull: "snapshot.bulkhead.shadow_rejected_full",
    bulkheadShadowTimeout: "snapshot.bulkhead.shadow_rejected_timeout",
    bulkheadOverLimit: "snapshot.bulkhead.over_limit",
    bulkheadStanding: "snapshot.bulkhead.standing",
    bulkheadClasses: "snapshot.bulkhead.classes",
    bulkheadShareDefault: "snapshot.bulkhead.queue.shares.default",
    bulkheadShareSheddable: "snapshot.bulkhead.queue.shares.sheddable",
    className: "snapshot.bulkhead.classes[].criticality",
    classSlots: "snapshot.bulkhead.classes[].slots",
    classActive: "snapshot.bulkhead.classes[].active",
    classQueued: "snapshot.bulkhead.classes[].queued",
    classFull: "snapshot.bulkhead.classes[].rejected_full",
    classDisplaced: "snapshot.bulkhead.classes[].displaced",
    classTimeout: "snapshot.bulkhead.classes[].rejected_timeout",
    degradation: "snapshot.degradation",
    level: "snapshot.degradation.level",
    levelName: "snapshot.degradation.level_name",
    levelFloor: "snapshot.degradation.floor",
    levelForced: "snapshot.degradation.forced",
    levelShadow: "snapshot.degradation.shadow",
    levelShadowRejections: "snapshot.degradation.shadow_rejections",
    levelTime: "snapshot.degradation.time_at_level",
    levelProbing: "snapshot.degradation.probing",
    levelProbeSuccesses: "snapshot.degradation.probe.successes",
    levelProbeTarget: "snapshot.config.degradation.probe_successes_to_recover",
    lastLevelFrom: "last.degradation.from",
    lastLevelTo: "last.degradation.to",
    lastLevelCause: "last.degradation.cause",
    lastLevelAgo: "last.degradation.ago_ms",
    lastLevelRehearsal: "last.degradation.rehearsal",
    fallback: "snapshot.fallback",
    fallbackEnabled: "snapshot.fallback.enabled",
    fallbackForced: "snapshot.fallback.forced",
    fallbackExhausted: "snapshot.fallback.exhausted",
    fallbackSteps: "snapshot.fallback.steps",
    stepName: "snapshot.fallback.steps[].name",
    fallbackTriggered: "snapshot.fallback.triggered",
    triggerName: "snapshot.fallback.triggered[].trigger",
    triggerCount: "snapshot.fallback.triggered[].count",
    fault: "snapshot.fault",
    injections: "snapshot.fault.injections",
    injectionId: "snapshot.fault.injections[].id",
    injectionKind: "snapshot.fault.injections[].kind",
    injectionPercent: "snapshot.fault.injections[].config.percent",
    injectionRoute: "snapshot.fault.injections[].config.route",
    injectionKey: "snapshot.fault.injections[].config.key",
    injectionUntil: "snapshot.fault.injections[].until",
    injectionRemaining: "snapshot.fault.injections[].remaining",
    injectionOrigin: "snapshot.fault.injections[].origin",
    injectionCount: "snapshot.fault.injections[].injected",
    historyFailureRate: "history.failure_rate",
    historyCalls: "history.calls",
    historyShortCircuits: "history.short_circuits",
    historyRejected: "history.rejected",
    historyAnswers: "history.answers",
  };
  // The answer to a change: one policy's snapshot, or every policy's (revert).
  const ANSWER = {
    breakerState: "breaker.state",
    levelName: "degradation.level_name",
    floor: "degradation.floor",
    generation: "generation",
  };
  // The parameter each kind of fault takes from the dashboard's one input.
  const FAULT_PARAMETERS = {
    latency: "delay",
    http_status: "status",
    grpc_status: "grpc_code",
    refused: null,
    reset: null,
    hang: "at_most",
    slow_body: "delay",
    failing_body: "after_bytes",
  };
  // A text for every breaker state: colour is never the only signal.
  const BREAKER_LABELS = {
    closed: "closed",
    open: "open",
    half_open: "half-open",
    forced_open: "forced open",
    forced_closed: "forced closed",
    disabled: "disabled",
  };

  /** The value at `path` in `obj`; undefined where a step is missing. */
  function at(obj, path) {
    let v = obj;
    for (const step of path.split(".")) {
      if (v === null || v === undefined || typeof v !== "object") {
        return undefined;
      }
      v = v[step];
    }
    return v;
  }
  const readFrame = (frame, key) => at(frame, FRAME[key]);
  const read = (policy, key) => at(policy, POLICY[key]);
  /** A field of one item of an array listed in POLICY with "[]". */
  const readItem = (item, key) => {
    const path = POLICY[key];
    return at(item, path.slice(path.lastIndexOf("[].") + 3));
  };
  const readAnswer = (answer, key) => at(answer, ANSWER[key]);

  // ---------------------------------------------------------------------------
  // Formatting.

  const UNIT_MS = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };

  /** Milliseconds of an API duration ("300ms", "10s", "2m"); null if none. */
  function ms(text) {
    if (typeof text !== "string") {
      return null;
    }
    const m = /^(\d+)\s*(ns|us|µs|ms|s|m|h)$/.exec(text.trim());
    return m ? Number(m[1]) * UNIT_MS[m[2]] : null;
  }

  /** "850 ms", "12 s", "3 m 05 s", "2 h 10 m". */
  function human(millis) {
    if (millis === null || millis === undefined || !isFinite(millis)) {
      return "–";
    }
    if (millis < 1000) {
      return `${Math.round(millis)} ms`;
    }
    const s = Math.floor(millis / 1000);
    if (s < 60) {
      return `${s} s`;
    }
    const m = Math.floor(s / 60);
    if (m < 60) {
      return `${m} m ${String(s % 60).padStart(2, "0")} s`;
    }
    return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} m`;
  }

  const words = (label) => String(label).replaceAll("_", " ");
  const rate = (n) => (n >= 10 ? n.toFixed(0) : n.toFixed(1));
  const percent = (x) => `${Math.round(x * 100)}%`;
  const last = (values) => (values && values.length ? values[values.length - 1] : null);
  const clock = (date) => date.toLocaleTimeString([], { hour12: false });

  // ---------------------------------------------------------------------------
  // DOM helpers: text is set as text, never parsed as markup (names come from the
  // policy file).

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") {
        node.className = v;
      } else if (k === "text") {
        node.textContent = v;
      } else if (k.startsWith("data-")) {
        node.dataset[k.slice(5).replace(/-([a-z])/g, (_, c) => c.toUpperCase())] = v;
      } else {
        node.setAttribute(k, v);
      }
    }
    for (const c of children) {
      node.append(c);
    }
    return node;
  }

  const field = (card, name) => card.querySelector(`[data-field="${name}"]`);
  function setText(card, name, text) {
    const node = field(card, name);
    if (node && node.textContent !== text) {
      node.textContent = text;
    }
  }

  const SVG = "http://www.w3.org/2000/svg";
  const SPAN = 60; // samples across a sparkline: one minute

  function sparkline(name, label) {
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", `0 0 ${SPAN - 1} 20`);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("class", `spark ${name}`);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", label);
    svg.dataset.field = name;
    const base = document.createElementNS(SVG, "line");
    base.setAttribute("x1", "0");
    base.setAttribute("x2", String(SPAN - 1));
    base.setAttribute("y1", "19.5");
    base.setAttribute("y2", "19.5");
    base.setAttribute("class", "base");
    svg.append(base);
    return svg;
  }

  /** Draws `values` (oldest first, null for "no data") scaled to `max`. */
  function draw(svg, values, max) {
    for (const old of svg.querySelectorAll("polyline")) {
      old.remove();
    }
    const offset = SPAN - values.length;
    let run = [];
    const flush = () => {
      if (run.length) {
        const line = document.createElementNS(SVG, "polyline");
        line.setAttribute("points", (run.length === 1 ? [run[0], run[0]] : run).join(" "));
        line.setAttribute("vector-effect", "non-scaling-stroke");
        svg.append(line);
      }
      run = [];
    };
    values.forEach((v, i) => {
      if (v === null || v === undefined) {
        flush();
        return;
      }
      const y = 19 - (Math.min(v, max) / max) * 18;
      run.push(`${offset + i},${y.toFixed(2)}`);
    });
    flush();
  }

  // ---------------------------------------------------------------------------
  // State of the page.

  let token = null; // the admin token, in memory only
  let changesAllowed = false;
  let instance = null;
  let restartedAt = null;
  let intervalMs = 1000;
  let lastFrameAt = 0;
  let pending = null; // the change waiting for confirmation
  const groups = document.getElementById("groups");
  const cards = new Map(); // policy name -> card element

  // ---------------------------------------------------------------------------
  // Cards.

  function panel(kind, title, ...body) {
    return el("section", { class: `panel ${kind}`, "data-panel": kind },
      el("h4", { text: title }), ...body);
  }

  function line(name, label) {
    return el("p", { class: "line" }, el("span", { class: "label", text: label }), " ",
      el("span", { "data-field": name }));
  }

  function makeCard(name) {
    const card = el("article", { class: "card", "data-policy": name, "data-health": "ok" },
      el("header", {},
        el("h3", { text: name }),
        el("span", { class: "health", "data-field": "health" }),
        el("p", { class: "routes", "data-field": "routes" }),
        el("p", { class: "changed", "data-field": "changed" })),
      el("div", { class: "panels" },
      panel("breaker", "Circuit breaker",
        el("p", { class: "state" },
          el("span", { class: "badge", "data-field": "breaker-state" }), " ",
          el("span", { class: "since", "data-field": "breaker-since" })),
        el("p", { class: "probe", "data-field": "breaker-probe" }),
        el("p", { class: "transition", "data-field": "breaker-transition" }),
        el("p", { class: "window", "data-field": "breaker-window" }),
        el("div", { class: "charts" },
          el("figure", {},
            sparkline("failure-rate", "failure rate, one sample a second over the last minute"),
            el("figcaption", {}, "failure rate ", el("b", { "data-field": "failure-rate-now" }))),
          el("figure", {},
            sparkline("short-circuits", "short-circuited calls per second over the last minute"),
            el("figcaption", {}, "short-circuited ", el("b", { "data-field": "short-circuits-now" })))),
        el("p", { class: "totals", "data-field": "breaker-totals" })),
      panel("bulkhead", "Bulkhead",
        el("p", { class: "meter-line" }, el("span", { class: "label", text: "active" }),
          el("meter", { min: "0", "data-field": "active-meter" }),
          el("span", { "data-field": "active" })),
        el("p", { class: "meter-line" }, el("span", { class: "label", text: "queued" }),
          el("meter", { min: "0", "data-field": "queued-meter" }),
          el("span", { "data-field": "queued" })),
        line("rejected", "rejected"),
        line("classes", "classes"),
        line("wait", "wait p99")),
      panel("degradation", "Degradation",
        el("p", { class: "state" },
          el("span", { class: "badge", "data-field": "level" }), " ",
          el("span", { class: "since", "data-field": "level-since" })),
        line("floor", "floor"),
        el("p", { class: "probe", "data-field": "level-probe" }),
        el("p", { class: "transition", "data-field": "level-transition" })),
      panel("fallback", "Fallback",
        el("p", { class: "state", "data-field": "fallback-state" }),
        el("figure", {},
          sparkline("answers", "fallback answers per second over the last minute"),
          el("figcaption", {}, "answers ", el("b", { "data-field": "answers-now" }))),
        el("ul", { class: "sources", "data-field": "sources" }),
        el("p", { class: "totals", "data-field": "triggers" })),
      panel("fault", "Rehearsal: injected faults",
        el("p", { class: "state", "data-field": "fault-state" }),
        el("ul", { class: "injections", "data-field": "injections" }))));
    if (token !== null) {
      addControls(card);
    }
    return card;
  }

  function health(p) {
    const state = read(p, "breakerState");
    const level = read(p, "level");
    if (state === "open" || state === "forced_open") {
      return ["down", state === "open" ? "short-circuiting" : "held open"];
    }
    if (state === "half_open") {
      return ["warn", "probing"];
    }
    if (typeof level === "number" && level > 0) {
      return ["warn", "degraded"];
    }
    if (state === "forced_closed" || state === "disabled") {
      return ["warn", "overridden"];
    }
    return ["ok", "healthy"];
  }

  function updateCard(card, p) {
    const [h, label] = health(p);
    card.dataset.health = h;
    const injecting = (read(p, "injections") || []).length > 0;
    card.dataset.rehearsal = String(injecting);
    setText(card, "health", injecting ? `${label} · rehearsal: faults injected` : label);
    const routes = read(p, "routes") || [];
    setText(card, "routes", routes.length ? `routes: ${routes.join(", ")}` : "no route declared");
    setText(card, "changed", read(p, "changed") ? "configuration changed at run time" : "");

    const hist = {
      failureRate: read(p, "historyFailureRate") || [],
      calls: read(p, "historyCalls") || [],
      shortCircuits: read(p, "historyShortCircuits") || [],
      rejected: read(p, "historyRejected") || [],
      answers: read(p, "historyAnswers") || {},
    };

    const breaker = card.querySelector("[data-panel=breaker]");
    breaker.hidden = !read(p, "breaker");
    if (read(p, "breaker")) {
      const state = read(p, "breakerState");
      const badge = field(card, "breaker-state");
      badge.dataset.state = state;
      setText(card, "breaker-state", BREAKER_LABELS[state] || words(state));
      setText(card, "breaker-since", `for ${human(ms(read(p, "breakerInState")))}`);
      const probe = field(card, "breaker-probe");
      const retry = ms(read(p, "breakerRetryAfter"));
      if (state === "open" && retry !== null) {
        probe.dataset.until = String(performance.now() + retry);
        probe.dataset.prefix = "next probe in ";
        probe.textContent = `next probe in ${human(retry)}`;
      } else {
        delete probe.dataset.until;
        let text = "";
        if (state === "half_open") {
          text = `probing: ${read(p, "breakerProbesInFlight")} probe(s) in flight`;
        } else if (state === "forced_open" || state === "forced_closed" || state === "disabled") {
          text = "held by an operator until reset";
        }
        const failed = read(p, "breakerFailedProbes");
        if (failed) {
          text += `${text ? "; " : ""}${failed} failed probe(s) in a row`;
        }
        const spell = ms(read(p, "breakerOpenSpell"));
        if (spell !== null && state !== "closed") {
          text += `${text ? "; " : ""}out of closed for ${human(spell)}`;
        }
        probe.textContent = text;
      }
      if (read(p, "lastBreakerTo") !== undefined && read(p, "lastBreakerTo") !== null) {
        setText(card, "breaker-transition",
          `last transition: ${BREAKER_LABELS[read(p, "lastBreakerFrom")] || words(read(p, "lastBreakerFrom"))} → ` +
          `${BREAKER_LABELS[read(p, "lastBreakerTo")] || words(read(p, "lastBreakerTo"))} ` +
          `(${words(read(p, "lastBreakerCause"))}${read(p, "lastBreakerRehearsal") ? ", a rehearsal: injected" : ""}), ` +
          `${human(read(p, "lastBreakerAgo"))} ago`);
      } else {
        setText(card, "breaker-transition", "no transition since this dashboard's server started");
      }
      const calls = read(p, "breakerWindowCalls");
      const consecutive = read(p, "breakerConsecutive");
      if (typeof calls === "number") {
        const failures = read(p, "breakerWindowFailures");
        setText(card, "breaker-window",
          `window: ${failures} of ${calls} failed${calls ? ` (${percent(failures / calls)})` : ""}`);
      } else if (typeof consecutive === "number") {
        setText(card, "breaker-window", `${consecutive} failure(s) in a row`);
      } else {
        setText(card, "breaker-window", "");
      }
      draw(field(card, "failure-rate"), hist.failureRate, 1);
      const fr = last(hist.failureRate);
      setText(card, "failure-rate-now", fr === null ? "– (no call ended)" : percent(fr));
      draw(field(card, "short-circuits"), hist.shortCircuits, Math.max(1, ...hist.shortCircuits));
      setText(card, "short-circuits-now", `${rate(last(hist.shortCircuits) || 0)}/s`);
      setText(card, "breaker-totals",
        `totals: ${read(p, "breakerCalls")} calls, ${read(p, "breakerFailures")} failed, ` +
        `${read(p, "breakerShortCircuited")} short-circuited; ${rate(last(hist.calls) || 0)} calls/s now` +
        (read(p, "breakerShadow")
          ? `; shadow mode: ${read(p, "breakerShadowRejections")} calls it would have rejected went through`
          : ""));
    }

    const bulkhead = card.querySelector("[data-panel=bulkhead]");
    bulkhead.hidden = !read(p, "bulkhead");
    if (read(p, "bulkhead")) {
      const active = read(p, "bulkheadActive");
      const maxActive = read(p, "bulkheadMaxConcurrent");
      const queued = read(p, "bulkheadQueued");
      const maxQueue = read(p, "bulkheadMaxQueue");
      const am = field(card, "active-meter");
      am.max = maxActive;
      am.high = Math.max(1, maxActive - 1);
      am.value = active;
      setText(card, "active", `${active} / ${maxActive}${active >= maxActive ? " (full)" : ""}`);
      const qm = field(card, "queued-meter");
      qm.max = Math.max(1, maxQueue);
      qm.value = queued;
      setText(card, "queued", `${queued} / ${maxQueue}${maxQueue > 0 && queued >= maxQueue ? " (full)" : ""}` +
        (read(p, "bulkheadStanding") ? "; standing: short waits, newest first" : ""));
      setText(card, "rejected",
        `${rate(last(hist.rejected) || 0)}/s now; ${read(p, "bulkheadRejectedFull")} full, ` +
        `${read(p, "bulkheadRejectedTimeout")} timed out in all` +
        (read(p, "bulkheadShadow")
          ? `; shadow mode: ${read(p, "bulkheadShadowFull")} full and ${read(p, "bulkheadShadowTimeout")} ` +
            `timed out went through beyond the limit, ${read(p, "bulkheadOverLimit")} of them running now`
          : ""));
      // With classes: each class's slots against its share, its line, and whom it lost.
      const classes = read(p, "bulkheadClasses") || [];
      const share = { default: read(p, "bulkheadShareDefault"), sheddable: read(p, "bulkheadShareSheddable") };
      field(card, "classes").parentNode.hidden = classes.length === 0;
      setText(card, "classes", classes.map((c) => {
        const name = readItem(c, "className");
        const displaced = readItem(c, "classDisplaced");
        const shed = readItem(c, "classFull") + displaced + readItem(c, "classTimeout");
        return `${name} ${readItem(c, "classActive")} / ${readItem(c, "classSlots")}` +
          (name in share ? ` (${share[name]} %)` : "") +
          `, ${readItem(c, "classQueued")} waiting, ${shed} shed` +
          (displaced > 0 ? ` (${displaced} displaced)` : "");
      }).join("; "));
      setText(card, "wait", human(ms(read(p, "bulkheadWaitP99"))));
    }

    const degradation = card.querySelector("[data-panel=degradation]");
    degradation.hidden = !read(p, "degradation");
    if (read(p, "degradation")) {
      const levels = read(p, "levels") || [];
      const level = read(p, "level");
      const badge = field(card, "level");
      badge.dataset.level = level === 0 ? "best" : "degraded";
      setText(card, "level", `${read(p, "levelName")} (level ${level + 1} of ${levels.length})`);
      setText(card, "level-since", `for ${human(ms(read(p, "levelTime")))}`);
      const floor = read(p, "levelFloor");
      setText(card, "floor",
        (floor === null || floor === undefined ? "none" : `${levels[floor] || floor} (set by an operator or a health signal)`) +
        (read(p, "levelForced") ? "; level forced by an operator" : "") +
        (read(p, "levelShadow")
          ? `; shadow mode: the best level serves (${read(p, "levelShadowRejections")} requests would have been served lower)`
          : ""));
      setText(card, "level-probe", read(p, "levelProbing")
        ? `probing the level above: ${read(p, "levelProbeSuccesses")} of ${read(p, "levelProbeTarget")} successes`
        : "");
      if (read(p, "lastLevelTo") !== undefined && read(p, "lastLevelTo") !== null) {
        setText(card, "level-transition",
          `last change: ${read(p, "lastLevelFrom")} → ${read(p, "lastLevelTo")} ` +
          `(${words(read(p, "lastLevelCause"))}${read(p, "lastLevelRehearsal") ? ", a rehearsal: injected" : ""}), ` +
          `${human(read(p, "lastLevelAgo"))} ago`);
      } else {
        setText(card, "level-transition", "no level change since this dashboard's server started");
      }
      card.dataset.levels = JSON.stringify(levels);
      const select = card.querySelector("select[data-field=floor-level]");
      if (select && select.options.length !== levels.length) {
        fillLevels(select, levels);
      }
    }

    const fallback = card.querySelector("[data-panel=fallback]");
    fallback.hidden = !read(p, "fallback");
    if (read(p, "fallback")) {
      const flags = [read(p, "fallbackEnabled") ? "enabled" : "disabled"];
      if (read(p, "fallbackForced")) {
        flags.push("forced: the primary is not called");
      }
      setText(card, "fallback-state", flags.join("; "));
      // Every step is a source, answering or not yet.
      const sources = (read(p, "fallbackSteps") || [])
        .map((step) => readItem(step, "stepName"))
        .map((name) => [name, hist.answers[name] || []]);
      const total = [];
      for (const [, values] of sources) {
        values.forEach((v, i) => {
          total[i] = (total[i] || 0) + v;
        });
      }
      draw(field(card, "answers"), total, Math.max(1, ...total));
      setText(card, "answers-now", `${rate(last(total) || 0)}/s`);
      const list = field(card, "sources");
      const items = sources.map(([source, values]) =>
        el("li", {}, el("span", { class: "label", text: source }), ` ${rate(last(values) || 0)}/s`));
      list.replaceChildren(...(items.length ? items : [el("li", { text: "no steps" })]));
      const fired = (read(p, "fallbackTriggered") || [])
        .filter((t) => readItem(t, "triggerCount") > 0)
        .map((t) => `${words(readItem(t, "triggerName"))} ${readItem(t, "triggerCount")}`);
      const exhausted = read(p, "fallbackExhausted");
      setText(card, "triggers",
        `fired by: ${fired.length ? fired.join(", ") : "nothing yet"}${exhausted ? `; exhausted ${exhausted}` : ""}`);
    }

    // What is injected, where, until when: a rehearsal is never mistaken for an incident.
    const fault = card.querySelector("[data-panel=fault]");
    fault.hidden = !read(p, "fault");
    if (read(p, "fault")) {
      const injections = read(p, "injections") || [];
      setText(card, "fault-state", injections.length
        ? `${injections.length} injection(s) in force; each ends by itself`
        : "nothing injected");
      const items = injections.map((i) => {
        const where = [readItem(i, "injectionRoute"), readItem(i, "injectionKey")].filter((w) => w).join(", ");
        const item = el("li", { "data-injection": String(readItem(i, "injectionId")) },
          el("span", { class: "label", text: words(readItem(i, "injectionKind")) }),
          ` ${readItem(i, "injectionPercent")} % of calls to ${where || "every route"}, ` +
          `until ${readItem(i, "injectionUntil")} (${human(ms(readItem(i, "injectionRemaining")))} left); ` +
          `${readItem(i, "injectionCount")} injected; started by ${words(readItem(i, "injectionOrigin"))}`);
        if (token !== null && changesAllowed) {
          const id = readItem(i, "injectionId");
          item.append(" ", control(read(p, "name"), `fault/stop?id=${id}`, "Stop",
            () => `Stop injection ${id} of “${read(p, "name")}” now?`));
        }
        return item;
      });
      field(card, "injections").replaceChildren(...items);
    }
  }

  // ---------------------------------------------------------------------------
  // Controls: only with a token, each after a confirmation.

  function control(policy, action, label, question) {
    const button = el("button", {
      type: "button", class: "control", "data-policy": policy, "data-action": action, text: label,
    });
    button.addEventListener("click", () => ask(question(), label, () =>
      send(`policies/${encodeURIComponent(policy)}/${action}`, `${policy}: ${label.toLowerCase()}`, policy)));
    return button;
  }

  function fillLevels(select, levels) {
    select.replaceChildren(...levels.map((l) => el("option", { value: l, text: l })));
  }

  function addControls(card) {
    const name = card.dataset.policy;
    const breaker = card.querySelector("[data-panel=breaker]");
    breaker.append(el("div", { class: "controls" },
      control(name, "breaker/force-open", "Force open",
        () => `Hold the breaker of “${name}” open? Every call is rejected until it is reset.`),
      control(name, "breaker/force-closed", "Force closed",
        () => `Hold the breaker of “${name}” closed? Every call goes through and it never trips, until it is reset.`),
      control(name, "breaker/reset", "Reset",
        () => `Reset the breaker of “${name}”? It starts closed with an empty window; an operator's hold ends.`)));
    const degradation = card.querySelector("[data-panel=degradation]");
    const select = el("select", { "data-field": "floor-level", "aria-label": `floor level of ${name}` });
    fillLevels(select, JSON.parse(card.dataset.levels || "[]"));
    const setFloor = el("button", {
      type: "button", class: "control", "data-policy": name, "data-action": "degradation/set-floor", text: "Set floor",
    });
    setFloor.addEventListener("click", () => {
      const level = select.value;
      ask(`Set the floor of “${name}” to “${level}”? The level will not climb above it until the floor is cleared.`,
        "Set floor",
        () => send(`policies/${encodeURIComponent(name)}/degradation/set-floor?level=${encodeURIComponent(level)}`,
          `${name}: floor ${level}`, name));
    });
    degradation.append(el("div", { class: "controls" }, select, setFloor,
      control(name, "degradation/clear-floor", "Clear floor",
        () => `Clear the floor of “${name}”? The level may climb back through probes.`)));
    // A rehearsal: one fault for a share of the calls, for a bounded time.
    const fault = card.querySelector("[data-panel=fault]");
    const kind = el("select", { "data-field": "fault-kind", "aria-label": `fault to inject into ${name}` },
      ...Object.keys(FAULT_PARAMETERS).map((k) => el("option", { value: k, text: words(k) })));
    const value = el("input", {
      type: "text", "data-field": "fault-value", size: "6", "aria-label": "its parameter (delay, status, code or bytes)",
      placeholder: "800ms",
    });
    const percentInput = el("input", { type: "number", min: "0", max: "100", value: "100", "data-field": "fault-percent", "aria-label": "percent of calls" });
    const minutes = el("input", { type: "number", min: "1", max: "1440", value: "10", "data-field": "fault-minutes", "aria-label": "minutes before it ends by itself" });
    const start = el("button", {
      type: "button", class: "control", "data-policy": name, "data-action": "fault/inject", text: "Inject",
    });
    start.addEventListener("click", () => {
      const param = FAULT_PARAMETERS[kind.value];
      const query = [`kind=${encodeURIComponent(kind.value)}`,
        `percent=${encodeURIComponent(percentInput.value)}`,
        `for=${encodeURIComponent(`${minutes.value}m`)}`];
      if (param && value.value.trim()) {
        query.push(`${param}=${encodeURIComponent(value.value.trim())}`);
      }
      ask(`Inject “${words(kind.value)}” into ${percentInput.value} % of the calls of “${name}” for ${minutes.value} minute(s)? ` +
        "It ends by itself then; callers see real failures meanwhile.", "Inject",
        () => send(`policies/${encodeURIComponent(name)}/fault/inject?${query.join("&")}`,
          `${name}: inject ${words(kind.value)}`, name));
    });
    fault.append(el("div", { class: "controls" }, kind, value, percentInput, minutes, start,
      control(name, "fault/stop", "Stop all",
        () => `Stop every fault injected into “${name}” now?`)));
  }

  function applyAccess() {
    const readOnly = document.getElementById("read-only");
    const unlock = document.getElementById("unlock");
    const unlocked = document.getElementById("unlocked");
    const on = changesAllowed && token !== null;
    if (!changesAllowed) {
      token = null;
      readOnly.textContent = "Read-only: changes are disabled on this instance (no admin token was configured).";
    } else {
      readOnly.textContent = "Read-only. Enter the admin token to steer the policies.";
    }
    readOnly.hidden = on;
    unlock.hidden = !changesAllowed || on;
    unlocked.hidden = !on;
    const hasControls = document.getElementById("revert") !== null;
    if (on && !hasControls) {
      for (const card of cards.values()) {
        addControls(card);
      }
      const revert = el("button", {
        type: "button", id: "revert", class: "control", "data-action": "revert",
        text: "Revert to the start-up document",
      });
      revert.addEventListener("click", () => ask(
        "Revert every policy to the document this instance started with? Operator holds (forced breakers, floors) stay.",
        "Revert", () => send("revert", "revert")));
      unlocked.querySelector(".controls-slot").append(revert);
    } else if (!on) {
      for (const node of document.querySelectorAll(".controls, #revert")) {
        node.remove();
      }
    }
    renderFleet();
  }

  const dialog = document.getElementById("confirm");
  function ask(question, label, run) {
    pending = run;
    document.getElementById("confirm-text").textContent = question;
    document.getElementById("confirm-yes").textContent = label;
    dialog.showModal();
    document.getElementById("confirm-no").focus();
  }
  document.getElementById("confirm-yes").addEventListener("click", () => {
    const run = pending;
    pending = null;
    dialog.close();
    if (run) {
      run();
    }
  });
  document.getElementById("confirm-no").addEventListener("click", () => {
    pending = null;
    dialog.close();
  });

  function showResult(text, ok) {
    const result = document.getElementById("result");
    result.hidden = false;
    result.dataset.ok = ok === null ? "pending" : String(ok);
    result.textContent = text;
  }

  function describe(answer, policy) {
    if (!answer || typeof answer !== "object") {
      return "";
    }
    const card = policy ? cards.get(policy) : null;
    const levels = card ? JSON.parse(card.dataset.levels || "[]") : [];
    const parts = [];
    if (readAnswer(answer, "breakerState") !== undefined) {
      parts.push(`breaker now ${BREAKER_LABELS[readAnswer(answer, "breakerState")] || readAnswer(answer, "breakerState")}`);
    }
    if (readAnswer(answer, "levelName") !== undefined) {
      const floor = readAnswer(answer, "floor");
      parts.push(`level now ${readAnswer(answer, "levelName")}, floor ${floor === null ? "none" : levels[floor] || floor}`);
    }
    if (readAnswer(answer, "generation") !== undefined) {
      parts.push(`document generation ${readAnswer(answer, "generation")}`);
    }
    return parts.join("; ");
  }

  /** Sends a change exactly as the JSON routes take it: a POST with no body. */
  async function send(path, what, policy, explain) {
    if (token === null) {
      return;
    }
    showResult(`${what}: sending…`, null);
    let res;
    try {
      res = await fetch(path, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}` },
        cache: "no-store",
        credentials: "omit",
        redirect: "error",
      });
    } catch (e) {
      showResult(`${what}: not sent (${e.message}); is the server up?`, false);
      return;
    }
    let answer = null;
    try {
      answer = await res.json();
    } catch (_) {
      answer = null;
    }
    if (res.ok) {
      showResult(`${what}: done (${res.status}). ${(explain || describe)(answer, policy)}`, true);
      return;
    }
    const why = answer && typeof answer.error === "string" ? answer.error : res.statusText;
    showResult(`${what}: refused (${res.status}): ${why}`, false);
    if (res.status === 401 || res.status === 403) {
      token = null;
      applyAccess();
    }
  }

  document.getElementById("unlock").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = document.getElementById("token");
    const value = input.value.trim();
    input.value = "";
    if (value.length < 16) {
      showResult("An admin token has at least 16 characters.", false);
      return;
    }
    token = value;
    applyAccess();
  });
  document.getElementById("lock").addEventListener("click", () => {
    token = null;
    applyAccess();
  });

  // ---------------------------------------------------------------------------
  // Frames.

  function render(frame) {
    const id = readFrame(frame, "instance");
    if (instance !== null && id !== instance) {
      restartedAt = new Date();
      cards.clear();
      groups.replaceChildren();
    }
    instance = id;
    intervalMs = readFrame(frame, "intervalMs") || 1000;
    if (changesAllowed !== readFrame(frame, "changesAllowed")) {
      changesAllowed = readFrame(frame, "changesAllowed");
      applyAccess();
    }
    const file = readFrame(frame, "file");
    document.getElementById("meta").textContent =
      `${file ? `policies from ${file}, ` : ""}document generation ${readFrame(frame, "generation")}` +
      `${readFrame(frame, "asStarted") ? " (as started)" : " (changed since start)"}` +
      (restartedAt ? ` · server restarted at ${clock(restartedAt)}: history starts again` : "");

    const seen = new Set();
    const byGroup = new Map();
    for (const p of readFrame(frame, "policies") || []) {
      const deps = read(p, "dependencies") || [];
      const key = deps.length ? deps.join(", ") : `policy ${read(p, "name")}`;
      if (!byGroup.has(key)) {
        byGroup.set(key, []);
      }
      byGroup.get(key).push(p);
    }
    const wanted = [];
    for (const [key, policies] of byGroup) {
      let group = groups.querySelector(`section.group[data-group="${CSS.escape(key)}"]`);
      if (!group) {
        group = el("section", { class: "group", "data-group": key },
          el("h2", {}, el("span", { class: "label", text: "dependency " }), key));
      }
      wanted.push(group);
      for (const p of policies) {
        const name = read(p, "name");
        seen.add(name);
        let card = cards.get(name);
        if (!card) {
          card = makeCard(name);
          cards.set(name, card);
        }
        if (card.parentElement !== group) {
          group.append(card);
        }
        updateCard(card, p);
      }
    }
    wanted.forEach((g, i) => {
      if (groups.children[i] !== g) {
        groups.insertBefore(g, groups.children[i] || null);
      }
    });
    for (const g of [...groups.children]) {
      if (!wanted.includes(g)) {
        g.remove();
      }
    }
    for (const [name, card] of cards) {
      if (!seen.has(name)) {
        card.remove();
        cards.delete(name);
      }
    }
    followFleet(readFrame(frame, "policies") || []);
  }

  // ---------------------------------------------------------------------------
  // The stream: reconnects by itself, says when its data is stale.

  const connection = document.getElementById("connection");
  function setConnection(state, text) {
    connection.dataset.state = state;
    connection.textContent = text;
    document.body.dataset.connection = state;
  }

  let source = null;
  let backoff = 1000;
  function connect() {
    if (source) {
      source.close();
    }
    setConnection(lastFrameAt ? "reconnecting" : "connecting", lastFrameAt ? "reconnecting…" : "connecting…");
    source = new EventSource("events");
    source.addEventListener("open", () => {
      backoff = 1000;
    });
    source.addEventListener("message", (e) => {
      let frame;
      try {
        frame = JSON.parse(e.data);
      } catch (_) {
        return;
      }
      lastFrameAt = performance.now();
      setConnection("live", "live");
      document.getElementById("stale").hidden = true;
      render(frame);
      // The fleet page needs one frame (the policies, whether changes are
      // allowed); then it reads the fleet's routes, and the stream rests.
      if (location.hash === "#fleet") {
        source.close();
      }
    });
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED) {
        // The browser gave up (an error status, say): try again ourselves.
        setTimeout(connect, backoff);
        backoff = Math.min(backoff * 2, 15000);
      }
    });
  }

  function tick() {
    const now = performance.now();
    const age = lastFrameAt ? now - lastFrameAt : null;
    const stale = document.getElementById("stale");
    if (age !== null && age > 3 * intervalMs && location.hash !== "#fleet") {
      setConnection("stale", `stale: no update for ${human(age)}`);
      stale.hidden = false;
      stale.textContent =
        `Stale data: no update from the server for ${human(age)} (last at ` +
        `${clock(new Date(Date.now() - age))}). What follows is what it said then; reconnecting…`;
    }
    for (const node of document.querySelectorAll("[data-until]")) {
      const left = Number(node.dataset.until) - now;
      node.textContent = left > 0 ? `${node.dataset.prefix}${human(left)}` : "probe due: the next call tests the dependency";
    }
  }

  // ---------------------------------------------------------------------------
  // The fleet page (#fleet): every instance coordinating a policy's breaker, as
  // the fleet's routes serve them (each instance reports every 5 s), the fleet
  // actions kept and the audit log; with the token, fleet-wide actions.

  // What the fleet page reads, by path, as FRAME and POLICY above: the
  // coordination in this instance's frame, the fleet view
  // (`fleet/policies/{name}/instances`), the actions and audit
  // (`…/actions`), and the action a fleet-wide change answers with.
  const FLEET = {
    coordination: "snapshot.fleet.coordination",
    floorFollower: "snapshot.fleet.floor",
    heldBy: "snapshot.fleet.coordination.fleet_action.id",
    heldRemaining: "snapshot.fleet.coordination.fleet_action.remaining",
    closed: "closed",
    open: "open",
    halfOpen: "half_open",
    forced: "forced",
    instances: "instances",
    ages: "ages_ms",
    instance: "instances[].instance",
    state: "instances[].state",
    inStateMs: "instances[].in_state_ms",
    openSpellMs: "instances[].open_spell_ms",
    calls: "instances[].calls",
    failures: "instances[].failures",
    shortCircuited: "instances[].short_circuited",
    fleetAction: "instances[].fleet_action",
    stuck: "instances[].stuck_open",
    stuckCause: "instances[].stuck_open.cause",
    stuckOpenFor: "instances[].stuck_open.open_for_ms",
    stuckOthersClosed: "instances[].stuck_open.others_closed",
    stuckOthersOpen: "instances[].stuck_open.others_open",
    stuckCheck: "instances[].stuck_open.dependency_check",
    actions: "actions",
    actionId: "actions[].id",
    actionKind: "actions[].kind",
    actionReason: "actions[].reason",
    actionSigner: "actions[].signer",
    actionIssued: "actions[].issued_at_ms",
    actionExpires: "actions[].expires_at_ms",
    audit: "audit",
    auditAt: "audit[].at_ms",
    auditInstance: "audit[].instance",
    auditEvent: "audit[].event",
    auditAction: "audit[].action",
    auditKind: "audit[].kind",
    auditSigner: "audit[].signer",
    auditReason: "audit[].reason",
    auditExpires: "audit[].expires_at_ms",
    issuedId: "id",
    issuedExpires: "expires_at_ms",
  };
  const readFleet = (obj, key) => at(obj, FLEET[key]);
  /** A field of one item of an array listed in FLEET with "[]". */
  const readFleetItem = (item, key) => {
    const path = FLEET[key];
    return at(item, path.slice(path.lastIndexOf("[].") + 3));
  };
  // What each stuck-open cause means, and what the operator does (docs/operations.md).
  const STUCK_LABELS = {
    local_only: "stuck open — local: this instance only",
    external_failure: "open — external failure",
    forced: "stuck open — forced",
  };
  const FLEET_EVERY_MS = 2000;
  const fleetSection = document.getElementById("fleet");
  const fleetList = document.getElementById("fleet-policies");
  const fleetPolicies = new Map(); // policy name -> { section, view, listing, error }
  let fleetTimer = null;

  document.getElementById("fleet-rules").textContent =
    "Fleet-wide actions reach every instance coordinating the breaker at its next health check " +
    "(every second) and end by themselves at their expiry, on each instance by its own timer. " +
    "The controls on the policy cards act on this instance only. When both apply, the later wins " +
    "on that instance: a local force, release or reset made after a fleet action stays when the " +
    "fleet action ends; otherwise, at its end (expiry or revert), each breaker returns to what it " +
    "was before it: its local force, or its own policy. A newer fleet force replaces the one in force.";

  const short = (id) => String(id || "").slice(0, 8);
  const when = (millis) => (typeof millis === "number" ? clock(new Date(millis)) : "–");
  const kindText = (kind) => (kind && typeof kind === "object"
    ? Object.entries(kind).map(([k, v]) => `${words(k)} ${short(v)}`).join(" ")
    : words(kind));

  /** The line an instance's stuck-open flag shows, with its evidence. */
  function stuckText(r) {
    const cause = readFleetItem(r, "stuckCause");
    const open = human(readFleetItem(r, "stuckOpenFor"));
    const closed = readFleetItem(r, "stuckOthersClosed");
    const others = readFleetItem(r, "stuckOthersOpen");
    const label = STUCK_LABELS[cause] || words(cause);
    const check = readFleetItem(r, "stuckCheck");
    if (cause === "local_only") {
      const evidence = check === true
        ? "the dependency's direct check passes"
        : `${closed} other instance(s) are closed`;
      return `${label}: open for ${open} while ${evidence} and no other instance is open; ` +
        "look at this instance (its network path, its configuration), not at the dependency";
    }
    if (cause === "external_failure") {
      const evidence = check === false
        ? "the dependency's direct check fails too"
        : `${others} other instance(s) open too and ${closed} closed`;
      return `${label}: open for ${open}, ${evidence}; ` +
        "the dependency is failing and the breaker is doing its job";
    }
    return `${label}: held open by an operator for ${open}; was it forgotten?`;
  }

  /** Who holds a breaker: a fleet-wide action, or an operator of that instance. */
  function holder(r) {
    const action = readFleetItem(r, "fleetAction");
    if (action) {
      return `held fleet-wide by action ${short(action)}`;
    }
    const state = readFleetItem(r, "state");
    if (state === "forced_open" || state === "forced_closed" || state === "disabled") {
      return "held by a local operator (this instance only)";
    }
    return "";
  }

  /** An instance's card: kept across refreshes (keyed by instance), so a card
   * opened for its details stays open and a control stays the same element. */
  function instanceCard(details, r, age) {
    const state = readFleetItem(r, "state");
    const spell = readFleetItem(r, "openSpellMs");
    const stuck = readFleetItem(r, "stuck");
    const held = holder(r);
    const card = details || el("details", { class: "instance", "data-instance": String(readFleetItem(r, "instance")) });
    card.dataset.state = state;
    card.dataset.stuck = stuck ? String(readFleetItem(r, "stuckCause")) : "";
    card.replaceChildren(
      el("summary", {},
        el("span", { class: "badge", "data-state": state, text: BREAKER_LABELS[state] || words(state) }), " ",
        el("b", { text: `instance ${short(readFleetItem(r, "instance"))}` }), " ",
        el("span", { class: "since", text: `for ${human(readFleetItem(r, "inStateMs"))}` }), " · ",
        el("span", { class: "age", "data-field": "age", text: `data ${human(age)} old` }),
        held ? el("span", { class: "held", "data-field": "held", text: ` · ${held}` }) : "",
        stuck ? el("span", { class: "stuck", "data-field": "stuck-flag", text: ` · ${STUCK_LABELS[readFleetItem(r, "stuckCause")] || "stuck"}` }) : ""),
      el("p", { "data-field": "instance-id", text: `instance ${readFleetItem(r, "instance")}` }),
      el("p", {
        "data-field": "instance-counts",
        text: `${readFleetItem(r, "calls")} calls, ${readFleetItem(r, "failures")} failed, ` +
          `${readFleetItem(r, "shortCircuited")} short-circuited since it started` +
          (typeof spell === "number" ? `; out of closed for ${human(spell)}` : ""),
      }),
      el("p", { "data-field": "instance-held", text: held || "not held: its own policy decides" }),
      el("p", { class: "evidence", "data-field": "stuck", text: stuck ? stuckText(r) : "not flagged stuck open" }));
    return card;
  }

  /** An action's line, kept across refreshes (keyed by id), with its revert button. */
  function actionItem(li, name, a, revertedBy) {
    const id = readFleetItem(a, "actionId");
    const kind = readFleetItem(a, "actionKind");
    const left = readFleetItem(a, "actionExpires") - Date.now();
    const ended = revertedBy ? `reverted by ${short(revertedBy)}` : left > 0 ? `${human(left)} left` : "expired";
    const item = li || el("li", { "data-action-id": String(id), "data-kind": typeof kind === "string" ? kind : "revert" },
      el("span", { "data-field": "action-text" }));
    setText(item, "action-text", `${kindText(kind)} “${readFleetItem(a, "actionReason")}” by ` +
      `${readFleetItem(a, "actionSigner") || "–"}, issued ${when(readFleetItem(a, "actionIssued"))}, ` +
      `until ${when(readFleetItem(a, "actionExpires"))} (${ended}); id ${short(id)}`);
    item.dataset.inForce = String(!revertedBy && left > 0);
    const holds = kind === "force_open" || kind === "force_closed";
    const button = item.querySelector("button");
    if (holds && !revertedBy && left > 0 && token !== null && changesAllowed) {
      if (!button) {
        const revert = el("button", {
          type: "button", class: "control", "data-policy": name, "data-action": `fleet/revert/${id}`, text: "Revert",
        });
        revert.addEventListener("click", () => fleetAsk(name, `revert/${id}`, "Revert fleet-wide",
          `End fleet action ${short(id)} (${kindText(kind)}) on every instance of “${name}” now? ` +
          "Each breaker returns to what it was before it, unless an operator changed it locally since."));
        item.append(" ", revert);
      }
    } else if (button) {
      button.remove();
    }
    return item;
  }

  function auditItem(e) {
    const instanceId = readFleetItem(e, "auditInstance");
    return el("tr", { "data-event": String(readFleetItem(e, "auditEvent")), "data-audit-action": String(readFleetItem(e, "auditAction")) },
      el("td", { text: when(readFleetItem(e, "auditAt")) }),
      el("td", { text: instanceId === "operator" ? "operator" : `instance ${short(instanceId)}` }),
      el("td", { text: String(readFleetItem(e, "auditEvent")) }),
      el("td", { text: `${readFleetItem(e, "auditKind")} ${short(readFleetItem(e, "auditAction"))}` }),
      el("td", { text: `“${readFleetItem(e, "auditReason")}” by ${readFleetItem(e, "auditSigner") || "–"}` }),
      el("td", { text: `until ${when(readFleetItem(e, "auditExpires"))}` }));
  }

  /** Asks, then sends a fleet-wide change and shows what it issued. */
  function fleetAsk(name, path, label, question) {
    const section = fleetPolicies.get(name)?.section;
    const reason = section?.querySelector("[data-field=fleet-reason]")?.value.trim() || "";
    const ttl = section?.querySelector("[data-field=fleet-ttl]")?.value.trim() || "15m";
    if (!reason) {
      showResult(`${name}: a fleet-wide action needs a reason`, false);
      return;
    }
    const query = `reason=${encodeURIComponent(reason)}${path.startsWith("revert/") ? "" : `&ttl=${encodeURIComponent(ttl)}`}`;
    ask(question, label, () => send(`fleet/policies/${encodeURIComponent(name)}/${path}${path.includes("?") ? "&" : "?"}${query}`,
      `${name}: ${label.toLowerCase()}`, name,
      (answer) => `fleet action ${short(readFleet(answer, "issuedId"))} issued, until ` +
        `${when(readFleet(answer, "issuedExpires"))}; every instance applies it at its next health check`)
      .then(() => pollFleet()));
  }

  function fleetControls(name, entry) {
    const reason = el("input", {
      type: "text", "data-field": "fleet-reason", size: "24", maxlength: "200",
      "aria-label": `reason for a fleet-wide action on ${name}`, placeholder: "reason (required)",
    });
    const ttl = el("input", {
      type: "text", "data-field": "fleet-ttl", size: "5", value: "15m",
      "aria-label": "expiry: it ends by itself after this (at most 4h)",
    });
    const button = (action, label, question) => {
      const b = el("button", {
        type: "button", class: "control", "data-policy": name, "data-action": `fleet/breaker/${action}`, text: label,
      });
      b.addEventListener("click", () => fleetAsk(name, `breaker/${action}`, label, question()));
      return b;
    };
    const until = () => `until ${ttl.value.trim() || "15m"} from now, when every instance ends it by itself`;
    const controls = el("div", { class: "controls" },
      el("span", { class: "label", text: "fleet-wide (every instance):" }), reason,
      el("span", { class: "label", text: "expires in" }), ttl);
    if (entry.breaker) {
      controls.append(
        button("force-open", "Force open fleet-wide",
          () => `Hold the breaker of “${name}” open on every instance, ${until()}? Every call is rejected meanwhile.`),
        button("force-closed", "Force closed fleet-wide",
          () => `Hold the breaker of “${name}” closed on every instance, ${until()}? Every call goes through and it never trips.`),
        button("reset", "Reset fleet-wide",
          () => `Reset the breaker of “${name}” on every instance? Each starts closed with an empty window.`));
    }
    if (entry.floor) {
      const select = el("select", { "data-field": "fleet-floor-level", "aria-label": `fleet-wide floor level of ${name}` },
        ...entry.levels.map((l) => el("option", { value: l, text: l })));
      const setFloor = el("button", {
        type: "button", class: "control", "data-policy": name, "data-action": "fleet/degradation/floor", text: "Set floor fleet-wide",
      });
      setFloor.addEventListener("click", () => fleetAsk(name,
        `degradation/floor?level=${encodeURIComponent(select.value)}`, "Set floor fleet-wide",
        `Hold the degradation floor of “${name}” at “${select.value}” on every instance, ${until()}? ` +
        "No instance climbs above it meanwhile; at the end each returns to the floor it had."));
      controls.append(select, setFloor);
    }
    return controls;
  }

  function fleetSectionFor(name) {
    let entry = fleetPolicies.get(name);
    if (!entry) {
      const section = el("article", { class: "fleet-policy card", "data-fleet-policy": name, "data-health": "ok" },
        el("header", {},
          el("h3", { text: name }),
          el("span", { class: "counts", "data-field": "fleet-counts" })),
        el("p", { class: "fleet-error", "data-field": "fleet-error" }),
        el("div", { class: "instances", "data-field": "fleet-instances" }),
        el("h4", { text: "Fleet actions kept (in force or recently ended)" }),
        el("ul", { class: "fleet-actions", "data-field": "fleet-actions" }),
        el("h4", { text: "Audit log (newest first)" }),
        el("table", { class: "audit" }, el("tbody", { "data-field": "fleet-audit" })));
      entry = { section, view: null, listing: null, error: null };
      fleetPolicies.set(name, entry);
    }
    return entry;
  }

  /** How bad a policy's fleet looks: open first, then half-open, then held. */
  function fleetRank(view) {
    if (!view) {
      return [4, 0];
    }
    const open = readFleet(view, "open") || 0;
    if (open > 0) {
      return [0, -open];
    }
    if ((readFleet(view, "halfOpen") || 0) > 0) {
      return [1, 0];
    }
    return (readFleet(view, "forced") || 0) > 0 ? [2, 0] : [3, 0];
  }

  function renderFleet() {
    const entries = [...fleetPolicies.entries()].filter(([, e]) => e.coordinated);
    document.getElementById("fleet-empty").hidden = entries.length > 0 || instance === null;
    document.getElementById("fleet-empty").textContent =
      "No policy of this instance coordinates its breaker with a fleet (register one to see the fleet here).";
    entries.sort(([a, ea], [b, eb]) => {
      const [ra, rb] = [fleetRank(ea.view), fleetRank(eb.view)];
      return ra[0] - rb[0] || ra[1] - rb[1] || a.localeCompare(b);
    });
    entries.forEach(([name, e], i) => {
      const { section, view, listing } = e;
      if (fleetList.children[i] !== section) {
        fleetList.insertBefore(section, fleetList.children[i] || null);
      }
      setText(section, "fleet-error", e.error || "");
      if (!e.breaker) {
        setText(section, "fleet-counts", "its degradation floor follows the fleet (no breaker coordinated)");
      }
      if (view) {
        const counts = [`${readFleet(view, "closed")} closed`, `${readFleet(view, "open")} open`,
          `${readFleet(view, "halfOpen")} half-open`, `${readFleet(view, "forced")} forced`];
        const reports = readFleet(view, "instances") || [];
        setText(section, "fleet-counts", `${reports.length} instance(s): ${counts.join(" · ")}`);
        const [rank] = fleetRank(view);
        section.dataset.health = rank === 0 ? "down" : rank === 3 ? "ok" : "warn";
        const ages = readFleet(view, "ages") || [];
        const list = field(section, "fleet-instances");
        const kept = new Map([...list.querySelectorAll("details.instance")].map((d) => [d.dataset.instance, d]));
        const cardsNow = reports.map((r, j) => instanceCard(kept.get(String(readFleetItem(r, "instance"))), r, ages[j]));
        const wantedCards = cardsNow.length ? cardsNow : [el("p", { text: "no instance has reported in the last 15 s" })];
        if (wantedCards.some((c, j) => list.children[j] !== c) || list.children.length !== wantedCards.length) {
          list.replaceChildren(...wantedCards);
        }
      }
      if (listing) {
        const actions = readFleet(listing, "actions") || [];
        const reverted = new Map();
        for (const a of actions) {
          const kind = readFleetItem(a, "actionKind");
          if (kind && typeof kind === "object" && kind.revert) {
            reverted.set(kind.revert, readFleetItem(a, "actionId"));
          }
        }
        const ul = field(section, "fleet-actions");
        const keptItems = new Map([...ul.querySelectorAll("li[data-action-id]")].map((li) => [li.dataset.actionId, li]));
        const items = actions.slice().reverse().map((a) => actionItem(keptItems.get(String(readFleetItem(a, "actionId"))),
          name, a, reverted.get(readFleetItem(a, "actionId"))));
        const wantedItems = items.length ? items : [el("li", { text: "none" })];
        if (wantedItems.some((c, j) => ul.children[j] !== c) || ul.children.length !== wantedItems.length) {
          ul.replaceChildren(...wantedItems);
        }
        const rows = (readFleet(listing, "audit") || []).map(auditItem);
        field(section, "fleet-audit").replaceChildren(...(rows.length ? rows
          : [el("tr", {}, el("td", { text: "no entry: no fleet action was issued for this breaker" }))]));
      }
      const has = section.querySelector(":scope > .controls");
      if (token !== null && changesAllowed && !has) {
        section.insertBefore(fleetControls(name, e), field(section, "fleet-instances"));
      }
    });
    for (const e of fleetPolicies.values()) {
      if (!e.coordinated) {
        e.section.remove();
      }
    }
  }

  async function fetchJson(path) {
    const res = await fetch(path, { cache: "no-store", credentials: "omit", redirect: "error" });
    const body = await res.json().catch(() => null);
    if (!res.ok) {
      throw new Error(body && typeof body.error === "string" ? body.error : res.statusText);
    }
    return body;
  }

  async function pollFleet() {
    if (fleetSection.hidden) {
      return;
    }
    await Promise.all([...fleetPolicies.entries()].filter(([, e]) => e.coordinated).map(async ([name, e]) => {
      const base = `fleet/policies/${encodeURIComponent(name)}`;
      try {
        const [view, listing] = await Promise.all([
          e.breaker ? fetchJson(`${base}/instances`) : Promise.resolve(null), fetchJson(`${base}/actions`)]);
        Object.assign(e, { view, listing, error: null });
      } catch (err) {
        e.error = `the fleet's store did not answer: ${err.message}`;
      }
    }));
    const failed = [...fleetPolicies.values()].some((e) => e.coordinated && e.error);
    if (location.hash === "#fleet" && lastFrameAt) {
      setConnection(failed ? "stale" : "live", failed ? "stale: the fleet's routes did not answer" : "live");
    }
    renderFleet();
  }

  /** Follows which policies are coordinated; notes on their local cards who holds them. */
  function followFleet(policies) {
    const coordinated = new Set();
    let added = false;
    for (const p of policies) {
      const name = read(p, "name");
      if (readFleet(p, "coordination") || readFleet(p, "floorFollower")) {
        coordinated.add(name);
        const entry = fleetSectionFor(name);
        added = added || !entry.coordinated;
        entry.coordinated = true;
        entry.breaker = Boolean(readFleet(p, "coordination"));
        entry.floor = Boolean(readFleet(p, "floorFollower"));
        entry.levels = read(p, "levels") || [];
      }
      const card = cards.get(name);
      const breaker = card?.querySelector("[data-panel=breaker]");
      if (!breaker || !readFleet(p, "coordination")) {
        continue;
      }
      let note = breaker.querySelector("[data-field=fleet-note]");
      if (!note) {
        note = el("p", { class: "fleet-note", "data-field": "fleet-note" });
        breaker.querySelector(".state").after(note);
      }
      const held = readFleet(p, "heldBy");
      const state = read(p, "breakerState");
      const text = held
        ? `held fleet-wide by action ${short(held)} for ${human(ms(readFleet(p, "heldRemaining")))} more (a local change now wins here)`
        : state === "forced_open" || state === "forced_closed" || state === "disabled"
          ? "held by a local operator: this instance only"
          : "coordinated with the fleet (see the fleet page)";
      if (note.textContent !== text) {
        note.textContent = text;
      }
    }
    for (const [name, e] of fleetPolicies) {
      e.coordinated = coordinated.has(name);
    }
    if (added && !fleetSection.hidden) {
      pollFleet();
    }
  }

  function showView() {
    const fleet = location.hash === "#fleet";
    fleetSection.hidden = !fleet;
    groups.hidden = fleet;
    for (const a of document.querySelectorAll("#views a")) {
      if ((a.dataset.view === "fleet") === fleet) {
        a.setAttribute("aria-current", "page");
      } else {
        a.removeAttribute("aria-current");
      }
    }
    if (fleet && source && lastFrameAt) {
      source.close();
    } else if (!fleet && source && source.readyState === EventSource.CLOSED) {
      connect();
    }
    if (fleet && fleetTimer === null) {
      pollFleet();
      fleetTimer = setInterval(pollFleet, FLEET_EVERY_MS);
    } else if (!fleet && fleetTimer !== null) {
      clearInterval(fleetTimer);
      fleetTimer = null;
    }
  }
  window.addEventListener("hashchange", showView);
  // The page's <base> (for its nesting) would send a bare "#fleet" link to
  // another address: the views change the hash of this one.
  for (const a of document.querySelectorAll("#views a")) {
    a.addEventListener("click", (e) => {
      e.preventDefault();
      location.hash = a.dataset.view === "fleet" ? "fleet" : "";
    });
  }

  applyAccess();
  showView();
  connect();
  setInterval(tick, 250);
})();
