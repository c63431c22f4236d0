/* The job page's Usage card: CPU, memory and (real GPUs only) GPU charts of the run, drawn from
   GET /api/v1/jobs/{id}/metrics/. While the job may still run, the series are read again every
   15 s, until no new sample came for a minute. Progressive: without JavaScript or Chart.js the card
   keeps its peaks in words. The x axis is time since the first sample (no date adapter needed). */
(function () {
  "use strict";
  var REFRESH_MS = 15000;
  var QUIET_S = 60;
  var palette = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4b5563"];

  function clock(seconds) {
    seconds = Math.max(0, Math.round(seconds));
    var h = Math.floor(seconds / 3600), m = Math.floor(seconds / 60) % 60, s = seconds % 60;
    var mm = (h && m < 10 ? "0" : "") + m, ss = (s < 10 ? "0" : "") + s;
    return (h ? h + ":" : "") + mm + ":" + ss;
  }

  function bytes(value) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (Math.abs(value) >= 1024 && i < units.length - 1) { value /= 1024; i++; }
    return (i ? value.toFixed(value < 10 ? 1 : 0) : value) + " " + units[i];
  }

  function points(times, values, start) {
    var out = [];
    for (var i = 0; i < times.length; i++) {
      out.push({x: times[i] - start, y: values[i] === null || values[i] === undefined ? null : values[i]});
    }
    return out;
  }

  function datasets(nodes, start, pick) {
    var sets = [], n = 0, multi = nodes.length > 1;
    nodes.forEach(function (node) {
      pick(node).forEach(function (line) {
        var colour = palette[n++ % palette.length];
        sets.push({label: (multi ? "rank " + node.node_rank + " " : "") + line.label,
                   data: points(node.at_epoch_s, line.values, start), borderColor: colour,
                   backgroundColor: colour, pointRadius: node.at_epoch_s.length > 1 ? 0 : 3,
                   borderWidth: 1.5, spanGaps: false, tension: 0.15});
      });
    });
    return sets;
  }

  function options(yTitle, format, max) {
    return {
      responsive: true, maintainAspectRatio: false, animation: false, parsing: true,
      interaction: {mode: "nearest", axis: "x", intersect: false},
      plugins: {
        legend: {display: true, labels: {boxWidth: 10}},
        tooltip: {callbacks: {
          title: function (items) { return items.length ? clock(items[0].parsed.x) : ""; },
          label: function (item) { return item.dataset.label + ": " + format(item.parsed.y); }
        }}
      },
      scales: {
        x: {type: "linear", ticks: {maxTicksLimit: 6, callback: function (v) { return clock(v); }}},
        y: {beginAtZero: true, suggestedMax: max, title: {display: false, text: yTitle},
            ticks: {maxTicksLimit: 5, callback: function (v) { return format(v); }}}
      }
    };
  }

  function percent(v) { return (v === null ? "–" : Math.round(v) + " %"); }
  function mem(v) { return (v === null ? "–" : bytes(v)); }

  function setup(card) {
    var charts = {};
    var url = card.getAttribute("data-metrics-url");
    var live = card.getAttribute("data-live") === "1";
    var box = card.querySelector("[data-usage-charts]");
    var empty = card.querySelector("[data-usage-empty]");

    function draw(data) {
      var nodes = (data.nodes || []).filter(function (n) { return n.at_epoch_s.length; });
      if (!nodes.length) return 0;
      var start = Math.min.apply(null, nodes.map(function (n) { return n.at_epoch_s[0]; }));
      var gpu = nodes.some(function (n) { return n.gpus.length; });
      var specs = {
        cpu: [datasets(nodes, start, function (n) { return [{label: "CPU", values: n.cpu_percent}]; }),
              options("% of one CPU", percent, 100)],
        memory: [datasets(nodes, start, function (n) { return [{label: "RSS", values: n.rss_bytes}]; }),
                 options("bytes", mem)],
        gpu_util: [datasets(nodes, start, function (n) {
          return n.gpus.map(function (g) { return {label: "GPU " + g.index, values: g.gpu_util_percent}; });
        }), options("%", percent, 100)],
        gpu_memory: [datasets(nodes, start, function (n) {
          return n.gpus.map(function (g) { return {label: "GPU " + g.index, values: g.gpu_memory_bytes}; });
        }), options("bytes", mem)]
      };
      box.hidden = false;
      if (empty) empty.hidden = true;
      card.querySelectorAll("[data-usage-gpu]").forEach(function (fig) { fig.hidden = !gpu; });
      Object.keys(specs).forEach(function (name) {
        if ((name === "gpu_util" || name === "gpu_memory") && !gpu) return;
        var canvas = card.querySelector('[data-usage-chart="' + name + '"]');
        if (!canvas) return;
        if (charts[name]) {
          charts[name].data.datasets = specs[name][0];
          charts[name].update("none");
        } else {
          charts[name] = new window.Chart(canvas, {type: "line", data: {datasets: specs[name][0]},
                                                   options: specs[name][1]});
        }
      });
      return Math.max.apply(null, nodes.map(function (n) { return n.at_epoch_s[n.at_epoch_s.length - 1]; }));
    }

    function load() {
      fetch(url, {credentials: "same-origin", headers: {Accept: "application/json"}})
        .then(function (resp) { return resp.ok ? resp.json() : null; })
        .then(function (data) {
          var last = data ? draw(data) : 0;
          var quiet = last && Date.now() / 1000 - last > QUIET_S;
          if (live && !(quiet && data.nodes.length)) window.setTimeout(load, REFRESH_MS);
        })
        .catch(function () { if (live) window.setTimeout(load, REFRESH_MS * 2); });
    }
    load();
  }

  function start() {
    if (typeof window.Chart === "undefined" || typeof window.fetch === "undefined") return;
    document.querySelectorAll(".job-usage[data-metrics-url]").forEach(setup);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
