// llmgw console: the few things htmx does not do (copy, the playground's stream, the usage chart).
// Loaded as a file: the Content-Security-Policy allows no inline script.
"use strict";

function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

// A button with data-copy="ID" copies the text of the element with that id (a new key's secret).
function setupCopy() {
  document.querySelectorAll("button[data-copy]").forEach((button) => {
    const secret = document.getElementById(button.dataset.copy);
    if (!secret) return;
    button.addEventListener("click", async () => {
      const text = secret.textContent.trim();
      try {
        await navigator.clipboard.writeText(text);
      } catch (_) {
        const range = document.createRange();
        range.selectNodeContents(secret);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        document.execCommand("copy");
      }
      button.textContent = "Copied";
    });
  });
}

async function errorMessage(response) {
  const text = await response.text();
  const doc = new DOMParser().parseFromString(text, "text/html");
  const message = doc.getElementById("error-message");
  return message ? message.textContent : "The request failed (" + response.status + ").";
}

async function pollVerdicts(requestId) {
  const box = document.getElementById("pg-verdicts");
  if (!box || !requestId) return;
  box.dataset.requestId = requestId;
  // Verdicts are flushed to the log about once a second: look a few times.
  for (let i = 0; i < 20; i++) {
    const response = await fetch("/ui/playground/verdicts?request_id=" + encodeURIComponent(requestId),
                                 {credentials: "same-origin"});
    if (!response.ok) return;
    const html = await response.text();
    if (box.dataset.requestId !== requestId) return;  // a newer request took the box
    box.innerHTML = html;
    if (box.querySelector("tr.verdict")) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function setupPlayground() {
  const form = document.getElementById("pg-form");
  if (!form) return;
  const output = document.getElementById("pg-output");
  const send = document.getElementById("pg-send");
  const stop = document.getElementById("pg-stop");
  let inFlight = null;  // the AbortController of the request in flight
  stop.addEventListener("click", () => {
    if (inFlight) inFlight.abort();
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const model = document.getElementById("pg-model").value;
    const input = document.getElementById("pg-input").value;
    const maxTokens = Number(document.getElementById("pg-max-tokens").value);
    output.textContent = "";
    output.classList.remove("problem");
    delete output.dataset.done;
    delete output.dataset.stopped;
    send.disabled = true;
    stop.disabled = false;
    const controller = new AbortController();
    inFlight = controller;
    let requestId = "";
    try {
      const response = await fetch("/ui/playground/chat", {
        method: "POST",
        credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRF-Token": csrfToken()},
        body: JSON.stringify({model: model, max_tokens: maxTokens,
                              messages: [{role: "user", content: input}]}),
        signal: controller.signal,
      });
      requestId = response.headers.get("X-Request-Id") || "";
      if (!response.ok) {
        output.classList.add("problem");
        output.textContent = await errorMessage(response);
      } else {
        await readStream(response, output);
      }
    } catch (err) {
      if (controller.signal.aborted) {
        // Stopped: the server drops the upstream call with the connection.
        output.dataset.stopped = "1";
        output.textContent += (output.textContent ? "\n" : "") + "[stopped]";
      } else {
        output.classList.add("problem");
        output.textContent = "The connection failed: " + err;
      }
    } finally {
      inFlight = null;
      output.dataset.done = "1";
      send.disabled = false;
      stop.disabled = true;
    }
    pollVerdicts(requestId);
  });
}

async function readStream(response, output) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, {stream: true});
    let cut;
    while ((cut = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, cut).trim();
      buffer = buffer.slice(cut + 1);
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") return;
      let event;
      try { event = JSON.parse(data); } catch (_) { continue; }
      if (event.error) {
        output.classList.add("problem");
        output.textContent += (output.textContent ? "\n" : "") + event.error.message;
        continue;
      }
      const choice = (event.choices || [])[0];
      const piece = choice && choice.delta && choice.delta.content;
      if (piece) output.textContent += piece;
    }
  }
}

async function setupUsageChart() {
  const canvas = document.getElementById("usage-chart");
  if (!canvas || typeof Chart === "undefined") return;
  const response = await fetch(canvas.dataset.src, {credentials: "same-origin"});
  if (!response.ok) return;
  const data = await response.json();
  const style = getComputedStyle(document.documentElement);
  const fg = style.getPropertyValue("--fg").trim();
  const line = style.getPropertyValue("--line").trim();
  const palette = ["#2456c7", "#1f7a3a", "#b42318", "#9a6700", "#7a3fb0", "#0e7c86", "#c2410c", "#4b5563"];
  data.datasets.forEach((set, i) => { set.backgroundColor = palette[i % palette.length]; });
  new Chart(canvas, {
    type: "bar",
    data: data,
    options: {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      scales: {
        x: {stacked: true, ticks: {color: fg}, grid: {color: line}},
        y: {stacked: true, beginAtZero: true, ticks: {color: fg}, grid: {color: line},
            title: {display: true, text: data.unit || "tokens", color: fg}},
      },
      plugins: {legend: {labels: {color: fg}}},
    },
  });
}

// An htmx request the server refused (an error page): its message above the page, not nothing.
function setupErrors() {
  document.body.addEventListener("htmx:responseError", async (event) => {
    const flash = document.getElementById("flash");
    if (!flash) return;
    const xhr = event.detail.xhr;
    const doc = new DOMParser().parseFromString(xhr.responseText, "text/html");
    const message = doc.getElementById("error-message");
    flash.textContent = message ? message.textContent : "The request failed (" + xhr.status + ").";
    flash.hidden = false;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  setupErrors();
  setupCopy();
  setupPlayground();
  setupUsageChart();
});
