// The field check: each device section with data-live-url asks the server for its live fields
// every few seconds while the page is visible, and puts each field's text in place
// (analyzer/review/fieldcheck.py makes the words; the page shows them before the first poll).
"use strict";

const POLL_MS = 5000;

function show(section, fields) {
  for (const element of section.querySelectorAll("[data-field]")) {
    const name = element.dataset.field;
    if (!(name in fields)) continue;
    element.textContent = name === "checked" ? "read " + fields[name] : fields[name];
    if (name === "condition") {
      element.className = {up: "ok", late: "warn", silent: "bad"}[fields[name]] || "";
    }
    if (name === "bearing_check") {  // the array's clap check (issue 36)
      element.className = {passed: "ok", failed: "bad"}[fields.bearing_check_verdict] || "";
    }
  }
}

async function poll(section) {
  const status = section.querySelector("[data-field=checked]");
  try {
    const response = await fetch(section.dataset.liveUrl,
                                 {credentials: "same-origin", redirect: "manual"});
    if (response.type === "opaqueredirect" || response.status === 0) {
      status.textContent = "signed out: sign in again to keep watching";
      return false;
    }
    if (!response.ok) {
      status.textContent = "not answered now (" + response.status + "); trying again";
      return true;
    }
    show(section, await response.json());
  } catch (error) {
    status.textContent = "the server cannot be reached; trying again";
  }
  return true;
}

function watch(section) {
  let timer = null;
  const next = async () => {
    timer = null;
    if (document.visibilityState !== "visible") return;
    if (await poll(section)) timer = setTimeout(next, POLL_MS);
  };
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && timer === null) next();
  });
  timer = setTimeout(next, POLL_MS);
}

for (const section of document.querySelectorAll("[data-live-url]")) watch(section);
