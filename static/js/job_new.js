// The job form's example selector: choosing a kind puts its example manifest in the editor
// at once (the texts are embedded in #example-texts), asking first when the manifest was
// edited. Without this script, "Load example" reloads the page with ?example=KIND.
(function () {
  "use strict";
  const select = document.getElementById("example-select");
  const data = document.getElementById("example-texts");
  const editor = document.getElementById("manifest");
  if (!select || !data || !editor) return;
  const texts = JSON.parse(data.textContent);
  const load = document.getElementById("example-load");
  if (load) load.hidden = true;
  let shown = select.value;

  select.addEventListener("change", function () {
    const text = texts[select.value];
    if (text === undefined) return;
    const edited = editor.value !== texts[shown];
    if (edited && !window.confirm("Replace the manifest you edited with the " + select.value + " example?")) {
      select.value = shown;
      return;
    }
    editor.value = text;
    shown = select.value;
    const url = new URL(window.location.href);
    url.searchParams.set("example", shown);
    window.history.replaceState(null, "", url);
  });
})();
