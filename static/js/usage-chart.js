/* The usage page's chart: billed GPU-hours (stacked bars) and cost (lines) per day by GPU model.
   Progressive: without JavaScript (or without Chart.js) the page keeps its table and plain bars. */
(function () {
  "use strict";
  function draw() {
    var data = document.getElementById("usage-chart-data");
    var canvas = document.getElementById("usage-chart");
    if (!data || !canvas || typeof window.Chart === "undefined") return;
    var chart = JSON.parse(data.textContent);
    if (!chart.days.length) return;
    var palette = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4b5563"];
    var datasets = [];
    chart.models.forEach(function (model, i) {
      var colour = palette[i % palette.length];
      datasets.push({type: "bar", label: model + " GPU-h", data: chart.gpu_hours[model], stack: "hours",
                     backgroundColor: colour, yAxisID: "y"});
    });
    // A cost line needs two days at least: over one day it would be stray dots (the table has the cost).
    if (chart.days.length > 1) chart.models.forEach(function (model, i) {
      var colour = palette[i % palette.length];
      datasets.push({type: "line", label: model + " $", data: chart.cost[model], borderColor: colour,
                     backgroundColor: colour, borderDash: [4, 3], tension: 0.2, yAxisID: "y1"});
    });
    canvas.parentNode.hidden = false;
    var bars = document.getElementById("usage-bars");
    if (bars) bars.hidden = true;
    new window.Chart(canvas, {
      data: {labels: chart.days, datasets: datasets},
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        interaction: {mode: "index", intersect: false},
        scales: {
          x: {stacked: true},
          y: {stacked: true, beginAtZero: true, title: {display: true, text: "GPU-hours"}},
          y1: {display: chart.days.length > 1, position: "right", beginAtZero: true,
               grid: {drawOnChartArea: false}, title: {display: true, text: "cost (USD)"}}
        }
      }
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
