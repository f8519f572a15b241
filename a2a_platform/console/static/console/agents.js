// The agent form: show the chosen handler's config fields, switch between those fields and
// the raw JSON (carrying the values across), and suggest the slug from the name.
// Without this script the page still works: every handler's fields show, and the server
// reads the chosen handler's (or the JSON, when "Raw JSON" is picked).
(function () {
  "use strict";
  const form = document.querySelector("form[data-agent-form]");
  if (!form) return;
  const handler = form.querySelector("select[name=handler]");
  const rawBlock = form.querySelector("[data-raw-config]");
  const raw = form.querySelector("textarea[name=config]");
  const modes = Array.from(form.querySelectorAll("input[name=config_mode]"));
  const sections = Array.from(form.querySelectorAll("[data-handler-section]"));

  function currentSection() {
    return sections.find(function (section) { return section.dataset.handlerSection === handler.value; });
  }
  function fieldsOf(section) {
    return section ? Array.from(section.querySelectorAll("[data-config-key]")) : [];
  }
  function hasForm(section) {
    return Boolean(section && (section.querySelector("[data-config-fields]") || section.querySelector("[data-no-settings]")));
  }
  function mode() {
    const checked = modes.find(function (input) { return input.checked; });
    return checked ? checked.value : "fields";
  }
  function setMode(value) {
    modes.forEach(function (input) { input.checked = input.value === value; });
  }

  // --- Fields <-> JSON, by the kind the server put on each input ---------------------
  function readField(input) {
    const kind = input.dataset.configKind;
    if (kind === "boolean") return input.checked;
    const text = input.value;
    if (text.trim() === "") return undefined;
    if (kind === "integer" || kind === "number") {
      const number = Number(text);
      return Number.isFinite(number) ? number : text;
    }
    if (kind === "enum") return JSON.parse(text);
    if (kind === "lines") return text.split("\n").map(function (line) { return line.trim(); }).filter(Boolean);
    if (kind === "pairs") {
      const pairs = {};
      text.split("\n").forEach(function (line) {
        const at = line.indexOf(":");
        if (at > 0) pairs[line.slice(0, at).trim()] = line.slice(at + 1).trim();
      });
      return pairs;
    }
    return text.trim();
  }
  function writeField(input, value) {
    const kind = input.dataset.configKind;
    if (kind === "boolean") { input.checked = Boolean(value); return; }
    if (value === undefined || value === null) { input.value = ""; return; }
    if (kind === "enum") { input.value = JSON.stringify(value); return; }
    if (kind === "lines") { input.value = [].concat(value).join("\n"); return; }
    if (kind === "pairs") {
      input.value = Object.keys(value).map(function (name) { return name + ": " + value[name]; }).join("\n");
      return;
    }
    input.value = String(value);
  }
  function fieldsToJson(section) {
    const config = {};
    fieldsOf(section).forEach(function (input) {
      const value = readField(input);
      if (value !== undefined) config[input.dataset.configKey] = value;
    });
    raw.value = JSON.stringify(config, null, 2);
  }
  function jsonToFields(section) {
    let config;
    try { config = JSON.parse(raw.value.trim() || "{}"); } catch (error) {
      return "The JSON does not parse (" + error.message + "): fix it, or keep editing it as JSON.";
    }
    if (config === null || typeof config !== "object" || Array.isArray(config)) return "The config must be a JSON object.";
    const inputs = fieldsOf(section);
    const keys = inputs.map(function (input) { return input.dataset.configKey; });
    const unknown = Object.keys(config).filter(function (key) { return keys.indexOf(key) < 0; });
    if (unknown.length) return "The JSON has keys the form does not know (" + unknown.join(", ") + "): keep editing it as JSON.";
    inputs.forEach(function (input) { writeField(input, config[input.dataset.configKey]); });
    return "";
  }

  let note = null;
  function say(text) {
    if (!note) {
      note = document.createElement("p");
      note.className = "error";
      note.setAttribute("role", "alert");
      note.dataset.modeNote = "1";
      form.querySelector("[data-config-mode]").appendChild(note);
    }
    note.textContent = text;
    note.hidden = !text;
  }

  function show() {
    const section = currentSection();
    const formable = hasForm(section);
    sections.forEach(function (other) { other.hidden = other !== section; });
    modes.forEach(function (input) { if (input.value === "fields") input.disabled = !formable; });
    if (!formable) setMode("raw");
    const rawMode = mode() === "raw";
    rawBlock.hidden = !rawMode;
    if (section) {
      const fields = section.querySelector("[data-config-fields]");
      if (fields) fields.hidden = rawMode;
    }
  }

  handler.addEventListener("change", function () { say(""); show(); });
  modes.forEach(function (input) {
    input.addEventListener("change", function () {
      const section = currentSection();
      if (input.value === "raw") {
        fieldsToJson(section);
      } else {
        const problem = jsonToFields(section);
        if (problem) { setMode("raw"); say(problem); show(); return; }
      }
      say("");
      show();
    });
  });
  show();

  // --- Slug from the name, until the slug is typed into --------------------------------
  const name = form.querySelector("[data-slug-source]");
  const slug = form.querySelector("[data-slug-target]");
  if (name && slug && !slug.disabled) {
    let typed = slug.value.trim() !== "";
    slug.addEventListener("input", function () { typed = slug.value.trim() !== ""; });
    name.addEventListener("input", function () {
      if (typed) return;
      slug.value = name.value.normalize("NFKD").replace(/[\u0300-\u036f]/g, "").toLowerCase()
        .replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 50).replace(/-+$/, "");
    });
  }
})();
