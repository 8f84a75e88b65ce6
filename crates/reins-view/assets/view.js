// The Reins session page. Everything it shows comes from the JSON data block and is put into the page as
// text (textContent, SVG attributes), never as markup or code. It makes no network request, except, when
// served by `reins ui`, polls of the same server for a change.
(function () {
  'use strict';
  var NS = 'http://www.w3.org/2000/svg';
  var CHUNK = 200;        // transcript items rendered at a time (more as the reader scrolls)
  var SHOW_CHARS = 2000;  // characters of a text shown before "Show all"
  var SHOW_LINES = 40;    // lines of a text shown before "Show all"
  var block = document.getElementById('reins-data');
  var page = block.getAttribute('data-page');
  var data = JSON.parse(block.textContent);
  var params = new URLSearchParams(location.search);
  var token = params.get('token');
  var app = document.getElementById('app');

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, String(attrs[k]));
    return e;
  }
  function tip(node, text) { var t = svg('title', {}); t.textContent = text; node.appendChild(t); return node; }
  function withToken(path) {
    return token ? path + (path.indexOf('?') >= 0 ? '&' : '?') + 'token=' + encodeURIComponent(token) : path;
  }
  function fmtMs(ms) {
    if (!(ms >= 0)) return '?';
    if (ms < 10) return ms.toFixed(2) + ' ms';
    if (ms < 1000) return ms.toFixed(0) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(2) + ' s';
    return (ms / 60000).toFixed(1) + ' min';
  }
  function fmtInt(n) { return (n || 0).toLocaleString('en-US'); }
  function fmtCost(c) { return c === null || c === undefined ? '–' : '$' + (c < 0.01 ? c.toFixed(5) : c.toFixed(4)); }
  function when(ms) { return ms === null || ms === undefined ? '?' : new Date(ms).toISOString().replace('T', ' ').replace('Z', ' UTC'); }
  function span(parent, cls, text) { var s = el('span', cls, text); parent.appendChild(s); return s; }
  function oneLine(s, n) { s = String(s).replace(/\s+/g, ' '); return s.length > n ? s.slice(0, n) + '…' : s; }

  // ---------------------------------------------------------------- session page
  var zoom = 1;
  var rendered = 0;
  var itemNodes = [];
  var observer = null;
  var sections = {};

  function renderHeader() {
    var s = data.session;
    var h = sections.header;
    h.textContent = '';
    var title = el('h1', null, 'Session ' + s.id);
    h.appendChild(title);
    document.title = 'Reins session ' + s.id.slice(0, 8);
    var m = el('div', 'meta');
    span(m, 'status status-' + s.status, s.status);
    span(m, null, 'started ' + s.created_at);
    span(m, null, 'model ' + (s.model || '–'));
    if (s.workspace) span(m, null, 'workspace ' + s.workspace);
    span(m, null, s.runs + ' run(s) · ' + s.steps + ' step(s) · ' + s.tool_calls + ' tool call(s)');
    var tokens = fmtInt(s.input_tokens) + ' in / ' + fmtInt(s.output_tokens) + ' out tokens';
    if (s.calls_without_usage > 0) tokens += ' (' + s.calls_without_usage + ' call(s) without usage)';
    span(m, null, tokens);
    span(m, null, 'cost ' + fmtCost(s.cost_usd));
    if (data.live) {
      var back = el('a', null, '← all sessions');
      back.href = withToken(data.live.list_url);
      m.appendChild(back);
      span(m, 'live', s.status === 'running' ? ' ● live' : '');
    }
    h.appendChild(m);
  }

  // The width of an SVG label in pixels (11 px system-ui: at most ~6.5 px a character).
  function textWidth(text) { return Math.ceil(String(text).length * 6.5); }

  // The width inside a section's padding (what an SVG may take without overflowing its frame).
  function contentWidth(sec) {
    var cs = getComputedStyle(sec);
    var w = sec.clientWidth - parseFloat(cs.paddingLeft || '0') - parseFloat(cs.paddingRight || '0') - 4;
    return Math.max(600, w || 1200);
  }

  function legend(items) {
    var l = el('div', 'legend');
    items.forEach(function (it) {
      var s = el('span');
      s.appendChild(el('i', 'swatch sw-' + it[0]));
      s.appendChild(document.createTextNode(it[1]));
      l.appendChild(s);
    });
    return l;
  }

  function niceStep(span, px) {
    // a tick every 1, 2 or 5 × 10^k ms, at least ~90 px apart
    var raw = span * 90 / Math.max(px, 1);
    var p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-6))));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= raw) return steps[i] * p;
    return 10 * p;
  }

  function renderTimeline() {
    var sec = sections.timeline;
    sec.textContent = '';
    sec.appendChild(el('h2', null, 'Timeline'));
    var c = el('div', 'controls');
    c.appendChild(document.createTextNode('Zoom '));
    [['−', 0.5], ['fit', 0], ['+', 2]].forEach(function (z) {
      var b = el('button', null, z[0]);
      b.type = 'button';
      b.addEventListener('click', function () { zoom = z[1] === 0 ? 1 : Math.min(4096, Math.max(1, zoom * z[1])); renderTimeline(); });
      c.appendChild(b);
    });
    c.appendChild(document.createTextNode(' ×' + zoom + ' · a bar is a call (click: its place in the transcript); lanes 1+ are tool calls running side by side'));
    sec.appendChild(c);
    sec.appendChild(legend([['model', 'model call'], ['tool', 'tool call'], ['compaction', 'compaction'],
      ['error', 'failed'], ['open', 'no end recorded'], ['limit', 'limit'], ['approval', 'approval']]));
    var width = contentWidth(sec);
    data.runs.forEach(function (run) {
      var box = el('div', 'run');
      var head = el('h3', null, 'Run ' + run.number + ' · ' + when(run.start_ms) + ' · ' + fmtMs(run.span_ms) +
        ' · ' + run.steps + ' step(s) · ' + run.tool_calls + ' tool call(s) · ');
      head.appendChild(el('span', 'status status-' + run.status, run.status));
      box.appendChild(head);
      if (run.error) box.appendChild(el('div', 'error-text', oneLine(run.error, 400)));
      var gutter = 64, laneH = 18, top = 18;
      var inner = (width - gutter - 10) * zoom;
      var spanMs = Math.max(run.span_ms, 1);
      var scale = inner / spanMs;
      var h = top + run.lanes * laneH + 6;
      var svgW = gutter + inner + 10;
      var g = svg('svg', { width: svgW, height: h, role: 'img' });
      g.setAttribute('aria-label', 'run ' + run.number + ' timeline');
      var tick = niceStep(spanMs, inner);
      for (var t = 0; t <= spanMs + 1e-9; t += tick) {
        var x = gutter + t * scale;
        g.appendChild(svg('line', { 'class': 'axis', x1: x, x2: x, y1: top - 4, y2: h }));
        var text = fmtMs(t);
        // A label that would run past the right edge ends at its tick instead of starting there.
        var atEnd = x + 2 + textWidth(text) > svgW - 2;
        var lbl = svg('text', atEnd ? { x: x - 2, y: 11, 'text-anchor': 'end' } : { x: x + 2, y: 11 });
        lbl.textContent = text;
        g.appendChild(lbl);
      }
      for (var lane = 0; lane < run.lanes; lane++) {
        var name = svg('text', { x: 2, y: top + lane * laneH + 12 });
        name.textContent = lane === 0 ? 'model' : 'tools ' + lane;
        g.appendChild(name);
      }
      run.bars.forEach(function (b) {
        // Within the run's span, at least a pixel wide, and never past the span's end.
        var x0 = Math.min(Math.max(0, b.start * scale), inner - 1);
        var bw = Math.max(1, Math.min(b.dur * scale, inner - x0));
        var r = svg('rect', {
          'class': 'bar ' + b.kind + (b.error ? ' error' : '') + (b.open ? ' open' : ''),
          x: gutter + x0, y: top + b.lane * laneH + 2,
          width: bw, height: laneH - 4, rx: Math.min(2, bw / 2)
        });
        var what = b.kind === 'tool' ? 'tool ' + b.name + ' (' + b.call_id + ') · step ' + b.step : b.kind === 'model' ? 'model call · step ' + b.step : 'compaction after step ' + b.step;
        tip(r, what + ' · ' + fmtMs(b.dur) + (b.open ? ' (no end recorded)' : '') + (b.error ? ' · failed' : '') + (b.detail ? '\n' + b.detail : ''));
        r.addEventListener('click', function () { jumpTo(run.number, b.step, b.kind === 'tool' ? b.call_id : null); });
        g.appendChild(r);
      });
      run.marks.forEach(function (m) {
        var x = gutter + Math.min(Math.max(0, m.t * scale), inner);
        var line = svg('line', { 'class': 'mark ' + m.kind, x1: x, x2: x, y1: top - 6, y2: h });
        tip(line, m.kind + ' · ' + fmtMs(m.t) + ' · ' + m.label);
        g.appendChild(line);
      });
      var sc = el('div', 'scroller');
      sc.appendChild(g);
      box.appendChild(sc);
      sec.appendChild(box);
    });
    if (data.runs.length === 0) sec.appendChild(el('p', 'note', 'No run recorded.'));
  }

  function renderChart() {
    var sec = sections.chart;
    sec.textContent = '';
    sec.appendChild(el('h2', null, 'Tokens and cost per step'));
    var steps = data.steps;
    if (steps.length === 0) { sec.appendChild(el('p', 'note', 'No model call recorded.')); return; }
    sec.appendChild(legend([['model', 'input tokens'], ['cached', 'cache reads'], ['output', 'output tokens'],
      ['cost', 'cost (own scale)'], ['error', 'failed call'], ['compaction', 'compaction'], ['approval', 'approval']]));
    var n = steps.length;
    var maxTok = 1, maxCost = 0, anyUsage = false, anyCost = false;
    steps.forEach(function (s) {
      if (s.usage) { anyUsage = true; maxTok = Math.max(maxTok, s.usage.input_tokens, s.usage.output_tokens); }
      if (s.cost_usd !== null && s.cost_usd !== undefined) { anyCost = true; maxCost = Math.max(maxCost, s.cost_usd); }
    });
    // The margins hold the axis labels, however long.
    var tokLabel = fmtInt(maxTok) + ' tok', costLabel = fmtCost(maxCost);
    var width = contentWidth(sec), height = 150, top = 8, bottom = 20;
    var left = Math.max(60, textWidth(tokLabel) + 10), right = anyCost ? Math.max(60, textWidth(costLabel) + 16) : 20;
    var w = width - left - right, hh = height - top - bottom;
    var xOf = function (i) { return left + (n === 1 ? w / 2 : i * w / (n - 1)); };
    var yTok = function (v) { return top + hh - v / maxTok * hh; };
    var yCost = function (v) { return top + hh - (maxCost > 0 ? v / maxCost * hh : 0); };
    var g = svg('svg', { width: width, height: height, role: 'img' });
    g.setAttribute('aria-label', 'tokens and cost per step');
    g.appendChild(svg('line', { 'class': 'axis', x1: left, x2: left + w, y1: top + hh, y2: top + hh }));
    var t1 = svg('text', { x: 2, y: top + 10 }); t1.textContent = tokLabel; g.appendChild(t1);
    var t0 = svg('text', { x: 2, y: top + hh }); t0.textContent = '0'; g.appendChild(t0);
    if (anyCost) { var tc = svg('text', { x: width - 4, y: top + 10, 'text-anchor': 'end' }); tc.textContent = costLabel; g.appendChild(tc); }
    var sx = svg('text', { x: left, y: height - 4 }); sx.textContent = 'step 1'; g.appendChild(sx);
    var ex = svg('text', { x: left + w, y: height - 4, 'text-anchor': 'end' }); ex.textContent = 'step ' + n + ' (all runs)'; g.appendChild(ex);
    // A series is a line through its points; with few points (one is no line at all) each is also a marker.
    function series(cls, pick, y) {
      var pts = [], marks = [];
      for (var i = 0; i < n; i++) {
        var v = pick(steps[i]);
        if (v === null || v === undefined) continue;
        pts.push(xOf(i).toFixed(1) + ',' + y(v).toFixed(1));
        marks.push([xOf(i), y(v)]);
      }
      if (pts.length > 1) g.appendChild(svg('polyline', { 'class': cls, points: pts.join(' ') }));
      // (The cost's markers are rings, larger, so that a token marker at the same place shows inside.)
      var r = cls === 's-cost' ? 4 : 2.5;
      if (marks.length <= 60) marks.forEach(function (p) { g.appendChild(svg('circle', { 'class': 'pt ' + cls, cx: p[0], cy: p[1], r: r })); });
    }
    if (anyUsage) {
      series('s-input', function (s) { return s.usage ? s.usage.input_tokens : null; }, yTok);
      series('s-cached', function (s) { return s.usage ? (s.usage.cached_input_tokens || 0) : null; }, yTok);
      series('s-output', function (s) { return s.usage ? s.usage.output_tokens : null; }, yTok);
    }
    if (anyCost) series('s-cost', function (s) { return s.cost_usd; }, yCost);
    // where each (run, step) sits on the x axis
    var index = {};
    steps.forEach(function (s, i) { index[s.run + ':' + s.step] = i; });
    steps.forEach(function (s, i) {
      if (s.error) g.appendChild(tip(svg('circle', { 'class': 's-error', cx: xOf(i), cy: top + hh - 3, r: 3 }), 'step ' + s.step + ' failed: ' + s.error));
    });
    data.runs.forEach(function (run) {
      run.marks.forEach(function (m) {
        if (m.kind !== 'compaction' && m.kind !== 'approval' && m.kind !== 'limit') return;
        var i = index[run.number + ':' + m.step];
        if (i === undefined) i = index[run.number + ':' + (m.step + 1)];
        if (i === undefined) return;
        var x = xOf(i) + (m.kind === 'compaction' ? Math.min(w / Math.max(n - 1, 1) / 2, 6) : 0);
        g.appendChild(tip(svg('line', { 'class': 'mark ' + m.kind, x1: x, x2: x, y1: top, y2: top + hh }), m.label));
      });
    });
    var hover = svg('line', { 'class': 'hover', x1: -10, x2: -10, y1: top, y2: top + hh });
    g.appendChild(hover);
    var pad = svg('rect', { x: left - 4, y: top, width: w + 8, height: hh, fill: 'transparent' });
    g.appendChild(pad);
    var info = el('div', null, anyUsage ? 'Point at the chart for a step; click it to go there.' : 'No model call reported usage.');
    info.id = 'chart-info';
    function at(ev) {
      var box = g.getBoundingClientRect();
      var i = n === 1 ? 0 : Math.round((ev.clientX - box.left - left) / w * (n - 1));
      return Math.max(0, Math.min(n - 1, i));
    }
    pad.addEventListener('mousemove', function (ev) {
      var i = at(ev), s = steps[i], x = xOf(i);
      hover.setAttribute('x1', x); hover.setAttribute('x2', x);
      var u = s.usage;
      info.textContent = 'run ' + s.run + ' · step ' + s.step + ' · ' +
        (u ? fmtInt(u.input_tokens) + ' in (' + fmtInt(u.cached_input_tokens || 0) + ' cached) / ' + fmtInt(u.output_tokens) + ' out' : 'no usage') +
        ' · cost ' + fmtCost(s.cost_usd) + ' · ' + s.tool_calls + ' tool call(s)' + (s.error ? ' · failed: ' + oneLine(s.error, 200) : '');
    });
    pad.addEventListener('click', function (ev) { var s = steps[at(ev)]; jumpTo(s.run, s.step, null); });
    var sc = el('div', 'scroller');
    sc.appendChild(g);
    sec.appendChild(sc);
    sec.appendChild(info);
    if (!anyCost) sec.appendChild(el('p', 'note', 'Cost per step: unknown (no prices for this model, or recorded before costs per step were).'));
  }

  // A text, bounded on the page: the first SHOW_LINES lines / SHOW_CHARS characters, then "Show all".
  function textBlock(b) {
    var wrap = el('div');
    var pre = el('pre');
    var s = b.s;
    var cut = s.length > SHOW_CHARS ? SHOW_CHARS : -1;
    var nl = -1, count = 0;
    for (var i = 0; i < s.length && (cut < 0 || i < cut); i++) {
      if (s.charCodeAt(i) === 10 && ++count === SHOW_LINES) { nl = i; break; }
    }
    if (nl >= 0) cut = nl;
    if (cut >= 0) {
      pre.textContent = s.slice(0, cut);
      wrap.appendChild(pre);
      var more = el('button', 'more', 'Show all (' + fmtInt(b.chars) + ' characters)');
      more.type = 'button';
      more.addEventListener('click', function () { pre.textContent = s; more.remove(); });
      wrap.appendChild(more);
    } else {
      pre.textContent = s;
      wrap.appendChild(pre);
    }
    if (b.chars > s.length || b.chars > data.max_text_chars) {
      wrap.appendChild(el('div', 'note', 'This text has ' + fmtInt(b.chars) + ' characters; the page carries its first and last ones (at most ' + fmtInt(data.max_text_chars) + ').'));
    }
    return wrap;
  }

  // An expander whose body is built when first opened.
  function expander(summaryText, body, cls) {
    var d = el('details', cls);
    d.appendChild(el('summary', null, summaryText));
    var filled = false;
    d.addEventListener('toggle', function () {
      if (d.open && !filled) { filled = true; var inner = el('div'); inner.appendChild(body()); d.appendChild(inner); }
    });
    return d;
  }

  function renderItem(it) {
    var node = el('div', 'item role-' + it.role + (it.is_error ? ' is-error' : ''));
    node.id = 'item-' + it.i;
    var head = el('div', 'head');
    span(head, 'role', it.role === 'tool' ? 'tool result' : it.role === 'summary' ? 'compaction summary' : it.role);
    var where = '#' + it.i + ' · run ' + it.run + ' · ' + (it.step > 0 ? 'step ' + it.step : 'before the first step');
    if (it.role === 'summary') where += ' · replaces ' + it.replaces + ' item(s)';
    if (it.reasoning) where += ' · ' + it.reasoning.items + ' reasoning item(s), sent back to ' + it.reasoning.api + ' only';
    head.appendChild(document.createTextNode(where));
    node.appendChild(head);
    if (it.role === 'tool') {
      var label = '← ' + (it.tool || 'tool') + ' (' + it.call_id + ') ' + (it.is_error ? 'error' : 'ok') + ' · ' + fmtInt(it.text.chars) + ' chars · ' + oneLine(it.text.s, 120);
      var d = expander(label, function () { return textBlock(it.text); }, 'result');
      d.setAttribute('data-call', it.call_id);
      node.appendChild(d);
    } else {
      if (it.text.s.length > 0 || !it.calls) node.appendChild(textBlock(it.text));
      (it.calls || []).forEach(function (c) {
        var d = expander('→ ' + c.name + ' (' + c.id + ') ' + oneLine(c.args.s, 120), function () { return textBlock(c.args); }, 'call');
        d.setAttribute('data-call', c.id);
        node.appendChild(d);
      });
    }
    return node;
  }

  function renderUpTo(n) {
    var list = sections.items;
    var sentinel = document.getElementById('sentinel');
    n = Math.min(n, data.items.length);
    var frag = document.createDocumentFragment();
    for (; rendered < n; rendered++) {
      var node = renderItem(data.items[rendered]);
      itemNodes.push(node);
      frag.appendChild(node);
    }
    list.insertBefore(frag, sentinel);
    sections.count.textContent = data.items.length + ' item(s)' + (rendered < data.items.length ? ' · ' + rendered + ' shown, more as you scroll' : '');
  }

  function renderTranscript() {
    var sec = sections.transcript;
    sec.textContent = '';
    rendered = 0;
    itemNodes = [];
    sec.appendChild(el('h2', null, 'Transcript'));
    sections.count = el('div', 'note');
    sec.appendChild(sections.count);
    sec.appendChild(el('div', 'note', 'Tool arguments and results open on a click; a long text shows its first ' + SHOW_LINES + ' lines or ' + fmtInt(SHOW_CHARS) + ' characters until "Show all".'));
    var list = el('div', 'items');
    sections.items = list;
    var sentinel = el('div');
    sentinel.id = 'sentinel';
    list.appendChild(sentinel);
    sec.appendChild(list);
    renderUpTo(CHUNK);
    if (observer) observer.disconnect();
    if (typeof IntersectionObserver === 'function') {
      observer = new IntersectionObserver(function (entries) {
        if (entries.some(function (e) { return e.isIntersecting; }) && rendered < data.items.length) renderUpTo(rendered + CHUNK);
      }, { rootMargin: '800px' });
      observer.observe(sentinel);
    } else {
      renderUpTo(data.items.length);
    }
  }

  function jumpTo(run, step, callId) {
    var target = -1;
    for (var i = 0; i < data.items.length; i++) {
      var it = data.items[i];
      if (it.run === run && it.step === step && (!callId || it.call_id === callId || (it.calls || []).some(function (c) { return c.id === callId; }))) {
        target = i;
        if (!callId || it.call_id === callId) break;
      }
    }
    if (target < 0) return;
    renderUpTo(target + CHUNK);
    var node = itemNodes[target];
    if (!node) return;
    if (callId) {
      var ds = node.querySelectorAll('details');
      for (var k = 0; k < ds.length; k++) if (ds[k].getAttribute('data-call') === callId) ds[k].open = true;
    }
    node.scrollIntoView({ block: 'center' });
    node.classList.add('flash');
    setTimeout(function () { node.classList.remove('flash'); }, 1500);
  }

  function sessionPage() {
    ['header', 'timeline', 'chart', 'transcript'].forEach(function (k) {
      var s = el(k === 'header' ? 'header' : 'section');
      s.id = k;
      sections[k] = s;
      app.appendChild(s);
    });
    renderHeader();
    renderTimeline();
    renderChart();
    renderTranscript();
    var resizeTimer = null;
    window.addEventListener('resize', function () {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(function () { renderTimeline(); renderChart(); }, 150);
    });
    // The width can change without a resize of the window (a scrollbar appears once the transcript is drawn):
    // the drawings follow their section's width.
    if (window.ResizeObserver) {
      var drawnAt = contentWidth(sections.chart);
      new ResizeObserver(function () {
        var now = contentWidth(sections.chart);
        if (now !== drawnAt) { drawnAt = now; renderTimeline(); renderChart(); }
      }).observe(sections.chart);
    }
    // ?expand=all: every item rendered and every expander clicked open (what the browser tests check).
    if (params.get('expand') === 'all') {
      renderUpTo(data.items.length);
      var sums = document.querySelectorAll('#transcript summary');
      for (var i = 0; i < sums.length; i++) sums[i].click();
      document.documentElement.setAttribute('data-clicked', String(sums.length));
    }
    // ?check=layout: the page checks its own layout once drawn (what the browser tests read).
    if (params.get('check') === 'layout') setTimeout(checkLayout, 1000);
    if (data.live) poll(function (fresh) {
      var grew = fresh.items.length > data.items.length;
      var seenAll = rendered >= data.items.length;
      data = fresh;
      renderHeader();
      renderTimeline();
      renderChart();
      if (grew && seenAll) renderUpTo(rendered + CHUNK); else renderUpTo(rendered);
    });
  }

  // What sticks out: the page wider than its window (a horizontal scrollbar), or a bar, label, mark or marker of
  // a timeline or the chart outside its box (at zoom 1). Recorded on the root element as data-layout: `ok` or
  // the list of what sticks out.
  function checkLayout() {
    var out = [];
    var doc = document.scrollingElement || document.documentElement;
    if (doc.scrollWidth > doc.clientWidth) out.push('page ' + doc.scrollWidth + ' px wide in ' + doc.clientWidth);
    var boxes = document.querySelectorAll('.scroller');
    for (var i = 0; i < boxes.length; i++) {
      var box = boxes[i].getBoundingClientRect();
      var parts = boxes[i].querySelectorAll('rect.bar, text, line.mark, circle');
      for (var k = 0; k < parts.length; k++) {
        var r = parts[k].getBoundingClientRect();
        if (r.right > box.right + 0.5 || r.left < box.left - 0.5) {
          out.push((parts[k].getAttribute('class') || parts[k].tagName) + ' ' + JSON.stringify(parts[k].textContent.slice(0, 30)) +
            ' at ' + Math.round(r.left) + '..' + Math.round(r.right) + ' outside ' + Math.round(box.left) + '..' + Math.round(box.right));
        }
      }
    }
    document.documentElement.setAttribute('data-layout', out.length ? out.join('; ') : 'ok');
  }

  // ---------------------------------------------------------------- live refresh (reins ui)
  function poll(onChange) {
    var busy = false;
    setInterval(function () {
      if (busy) return;
      busy = true;
      fetch(withToken(data.live.stamp_url), { cache: 'no-store', credentials: 'omit' })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (s) {
          if (!s || s.stamp === data.live.stamp) return null;
          return fetch(withToken(data.live.data_url), { cache: 'no-store', credentials: 'omit' })
            .then(function (r) { return r.ok ? r.json() : null; })
            .then(function (fresh) { if (fresh) onChange(fresh); });
        })
        .catch(function () { /* the server stopped: keep what is shown */ })
        .then(function () { busy = false; });
    }, data.live.poll_ms);
  }

  // ---------------------------------------------------------------- session list (reins ui)
  function listPage() {
    var h = el('header');
    h.appendChild(el('h1', null, 'Reins sessions'));
    var m = el('div', 'meta');
    span(m, null, data.store);
    span(m, 'live', '● live');
    h.appendChild(m);
    app.appendChild(h);
    var sec = el('section');
    app.appendChild(sec);
    function render() {
      sec.textContent = '';
      if (data.sessions.length === 0) { sec.appendChild(el('p', 'note', 'No sessions recorded yet.')); return; }
      var table = el('table');
      var hr = el('tr');
      ['session', 'started', 'model', 'status', 'steps', 'tool calls', 'tokens', 'cost'].forEach(function (t, i) {
        hr.appendChild(el('th', i >= 4 ? 'num' : null, t));
      });
      table.appendChild(hr);
      data.sessions.forEach(function (s) {
        var tr = el('tr');
        var td = el('td');
        var a = el('a', null, s.id);
        a.href = withToken(data.live.session_url + encodeURIComponent(s.id));
        td.appendChild(a);
        tr.appendChild(td);
        tr.appendChild(el('td', null, s.created_at.replace('T', ' ').slice(0, 19)));
        tr.appendChild(el('td', null, s.model || '–'));
        tr.appendChild(el('td', 'status status-' + s.status, s.status));
        tr.appendChild(el('td', 'num', s.steps));
        tr.appendChild(el('td', 'num', s.tool_calls));
        tr.appendChild(el('td', 'num', fmtInt(s.input_tokens + s.output_tokens) + (s.calls_without_usage > 0 ? '+?' : '')));
        tr.appendChild(el('td', 'num', fmtCost(s.cost_usd)));
        table.appendChild(tr);
      });
      sec.appendChild(table);
    }
    render();
    poll(function (fresh) { data = fresh; render(); });
  }

  if (page === 'list') listPage(); else sessionPage();
  // When the first view was drawn, in milliseconds since navigation began (the browser tests report it).
  document.documentElement.setAttribute('data-render-ms', String(Math.round(performance.now())));
  document.documentElement.setAttribute('data-ready', '1');
})();
