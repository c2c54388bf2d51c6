<#
.SYNOPSIS
    linecite installer for Windows: Python check, .venv beside this script, requirements, a
    stdio self-test, then the MCP server over HTTP in the background. Running it again changes
    nothing that is already in place.

.EXAMPLE
    powershell -ExecutionPolicy Bypass -File .\install.ps1
.EXAMPLE
    powershell -ExecutionPolicy Bypass -File .\install.ps1 -ConfigureClaude
.EXAMPLE
    powershell -ExecutionPolicy Bypass -File .\install.ps1 -Stop

.NOTES
    Linux and macOS: install.sh does the same steps. Written for Windows PowerShell 5.1 and
    PowerShell 7, in plain ASCII.
#>
[CmdletBinding()]
param(
    # HTTP port of the background server
    [int]$Port = 8000,
    # address to bind; any but loopback needs LINECITE_HTTP_TOKEN
    [string]$BindHost = '127.0.0.1',
    # install and check only; do not start the server
    [switch]$NoLaunch,
    # start the server only (the venv must exist)
    [switch]$SkipInstall,
    # add linecite to Claude Desktop's config (backed up first)
    [switch]$ConfigureClaude,
    # also install Tesseract OCR through winget and check its Korean and Chinese data
    [switch]$WithOcr,
    # stop the background server and exit
    [switch]$Stop
)

$ErrorActionPreference = 'Stop'

$Here = $PSScriptRoot
$Venv = Join-Path $Here '.venv'
$VenvPy = Join-Path $Venv 'Scripts\python.exe'
$ServerPy = Join-Path $Here 'server.py'
$Requirements = Join-Path $Here 'requirements.txt'
$VerifyPy = Join-Path $Here 'verify_install.py'
$McpConfigPy = Join-Path $Here 'mcp_config.py'
$Stamp = Join-Path $Venv '.linecite-requirements.sha256'  # hash of the requirements.txt last installed

# The base folder, as server.py works it out (kb.py): LINECITE_HOME, else %LOCALAPPDATA%\linecite.
if ($env:LINECITE_HOME) {
    $Base = $env:LINECITE_HOME
} else {
    $Base = Join-Path $env:LOCALAPPDATA 'linecite'
}
$LogDir = Join-Path $Base 'logs'
$LogFile = Join-Path $LogDir 'server.log'          # the server's stderr: its log
$OutFile = Join-Path $LogDir 'server.stdout.log'   # Start-Process needs a second file for stdout
$PidFile = Join-Path $LogDir 'server.pid'
$ClaudeConfig = Join-Path $env:APPDATA 'Claude\claude_desktop_config.json'

$script:Changed = $false  # set when a step changed something; false at the end: nothing to do

function Write-Step([string]$Message) { Write-Host "==> $Message" -ForegroundColor Cyan }
function Write-Info([string]$Message) { Write-Host "    $Message" }
function Write-Warning2([string]$Message) { Write-Host "WARNING: $Message" -ForegroundColor Yellow }
function Stop-Install([string]$Message) {
    Write-Host "ERROR: $Message" -ForegroundColor Red
    exit 1
}

# Run a program with its output on the console; return its exit code. Windows PowerShell 5.1
# would turn a native program's stderr into errors under 'Stop', so this relaxes it meanwhile.
function Invoke-Native([string]$Exe, [string[]]$Arguments) {
    $saved = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        & $Exe @Arguments | Out-Host
    } finally {
        $ErrorActionPreference = $saved
    }
    return $LASTEXITCODE
}

# -- helpers for the background server --------------------------------------------------------
# The process in the PID file when it is alive and is this venv's python; else $null.
function Get-ServerProcess {
    if (-not (Test-Path -LiteralPath $PidFile)) { return $null }
    $text = Get-Content -LiteralPath $PidFile -Raw
    $serverId = 0
    if ($null -eq $text -or -not [int]::TryParse($text.Trim(), [ref]$serverId)) { return $null }
    $proc = Get-Process -Id $serverId -ErrorAction SilentlyContinue
    if ($null -eq $proc) { return $null }
    $path = $null
    try { $path = $proc.Path } catch { $path = $null }
    if ($path -and ($path -ieq $VenvPy)) { return $proc }
    return $null  # the PID was reused by another program
}

function Get-CommandLine([int]$ProcessId) {
    try {
        $info = Get-CimInstance Win32_Process -Filter "ProcessId = $ProcessId"
        if ($null -ne $info) { return [string]$info.CommandLine }
    } catch {
        return $null
    }
    return $null
}

# True when something accepts connections on the port (a wildcard bind is checked on loopback).
function Test-PortOpen {
    $target = $BindHost
    if ($target -eq '0.0.0.0') { $target = '127.0.0.1' }
    if ($target -eq '::') { $target = '::1' }
    if ($target.Contains(':')) {
        $client = New-Object System.Net.Sockets.TcpClient -ArgumentList ([System.Net.Sockets.AddressFamily]::InterNetworkV6)
    } else {
        $client = New-Object System.Net.Sockets.TcpClient
    }
    try {
        $async = $client.BeginConnect($target, $Port, $null, $null)
        if (-not $async.AsyncWaitHandle.WaitOne(500)) { return $false }
        $client.EndConnect($async)
        return $true
    } catch {
        return $false
    } finally {
        $client.Close()
    }
}

function Stop-Server {
    $proc = Get-ServerProcess
    if ($null -eq $proc) {
        Write-Info "no linecite server is running from $PidFile"
    } else {
        Write-Step "Stopping the linecite server (PID $($proc.Id))"
        # The venv's python.exe is a launcher with the real python as its child: stop both.
        try {
            $children = @(Get-CimInstance Win32_Process -Filter "ParentProcessId = $($proc.Id)")
        } catch {
            $children = @()
        }
        foreach ($child in $children) {
            Stop-Process -Id $child.ProcessId -Force -ErrorAction SilentlyContinue
        }
        Stop-Process -Id $proc.Id -Force -ErrorAction SilentlyContinue
        $proc.WaitForExit(10000) | Out-Null
        Write-Info 'stopped'
    }
    Remove-Item -LiteralPath $PidFile -Force -ErrorAction SilentlyContinue
}

if ($Stop) {
    Stop-Server
    exit 0
}

# -- 1. Python 3.10+ ----------------------------------------------------------------------------
# Runs a candidate; returns @{ Version = 312; Bits = 64; Exe = sys.executable } or $null.
function Get-PythonInfo([string]$Exe, [string[]]$Prefix) {
    if ($null -eq (Get-Command $Exe -ErrorAction SilentlyContinue)) { return $null }
    $code = 'import sys; print(sys.version_info[0] * 100 + sys.version_info[1]); ' +
        'print(64 if sys.maxsize > 2 ** 32 else 32); print(sys.executable)'
    $saved = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        $out = @(& $Exe @Prefix -c $code 2>$null)
    } catch {
        return $null
    } finally {
        $ErrorActionPreference = $saved
    }
    # The Microsoft Store's python.exe stub prints nothing useful and fails.
    if ($LASTEXITCODE -ne 0 -or $out.Count -lt 3) { return $null }
    $version = 0
    $bits = 0
    if (-not [int]::TryParse([string]$out[0], [ref]$version)) { return $null }
    if (-not [int]::TryParse([string]$out[1], [ref]$bits)) { return $null }
    return @{ Version = $version; Bits = $bits; Exe = [string]$out[2] }
}

if (-not $SkipInstall) {
    Write-Step 'Checking for Python 3.10 or newer (py -3, then python)'
    # py -3 is the newest Python the launcher knows; a tested version (3.10 to 3.13) is preferred
    # when one is installed too. 64-bit only: several packages have no 32-bit Windows wheels.
    $candidates = @(
        @{ Exe = 'py'; Prefix = @('-3') },
        @{ Exe = 'python'; Prefix = @() },
        @{ Exe = 'py'; Prefix = @('-3.13') },
        @{ Exe = 'py'; Prefix = @('-3.12') },
        @{ Exe = 'py'; Prefix = @('-3.11') },
        @{ Exe = 'py'; Prefix = @('-3.10') }
    )
    $found = @()
    foreach ($candidate in $candidates) {
        $info = Get-PythonInfo $candidate.Exe $candidate.Prefix
        if ($null -ne $info -and $info.Version -ge 310) { $found += $info }
    }
    $Py = $null
    foreach ($info in $found) {
        if ($info.Bits -eq 64 -and $info.Version -le 313) { $Py = $info; break }
    }
    if ($null -eq $Py) {
        foreach ($info in $found) {
            if ($info.Bits -eq 64) { $Py = $info; break }
        }
    }
    if ($null -eq $Py) {
        $why = 'no Python 3.10 or newer found.'
        if ($found.Count -gt 0) { $why = "only a 32-bit Python was found ($($found[0].Exe)); linecite needs a 64-bit one." }
        Stop-Install ($why + ' Install it with: winget install Python.Python.3.12 ' +
            '(or from https://www.python.org/downloads/ , ticking "Add python.exe to PATH"), ' +
            'then open a new PowerShell window and run this again.')
    }
    $PyVersion = $Py.Version
    $Py = $Py.Exe
    Write-Info ('{0} (Python {1}.{2})' -f $Py, [math]::Floor($PyVersion / 100), ($PyVersion % 100))
    if ($PyVersion -ge 314) {
        Write-Warning2 'linecite is tested on Python 3.10 to 3.13; some packages may not install on this one'
    }

    # -- 2. the venv ------------------------------------------------------------------------------
    Write-Step "Creating the virtual environment $Venv"
    $venvOk = $false
    if (Test-Path -LiteralPath $VenvPy) {
        $venvOk = ((Invoke-Native $VenvPy @('-c', 'import sys')) -eq 0)
    }
    if ($venvOk) {
        Write-Info 'already there, reusing it'
    } else {
        if ((Invoke-Native $Py @('-m', 'venv', '--clear', $Venv)) -ne 0) {
            Stop-Install "could not create $Venv"
        }
        $script:Changed = $true
        Write-Info 'created'
    }

    # -- 3. requirements, only when requirements.txt changed since the last install -------------
    Write-Step 'Installing requirements.txt'
    $want = (Get-FileHash -Algorithm SHA256 -LiteralPath $Requirements).Hash.ToLower()
    $have = ''
    if (Test-Path -LiteralPath $Stamp) { $have = ([string](Get-Content -LiteralPath $Stamp -Raw)).Trim() }
    if ($have -eq $want) {
        Write-Info 'unchanged since the last install, skipping pip'
    } else {
        $pipArgs = @('-m', 'pip', 'install', '--disable-pip-version-check', '-r', $Requirements)
        if ((Invoke-Native $VenvPy $pipArgs) -ne 0) {
            Stop-Install 'pip could not install requirements.txt (see above)'
        }
        $script:Changed = $true

        # -- 4. check: the server starts over stdio and lists its tools ----------------------------
        Write-Step 'Checking the install: starting server.py over stdio and listing its tools'
        if ((Invoke-Native $VenvPy @($VerifyPy)) -ne 0) {
            Stop-Install 'the installed server did not list its tools (see above); the install is broken'
        }
        # Only a checked install is recorded as done, so a failed run is retried next time.
        Set-Content -LiteralPath $Stamp -Value $want -Encoding Ascii
    }
} elseif (-not (Test-Path -LiteralPath $VenvPy)) {
    Stop-Install "-SkipInstall: no $VenvPy yet; run install.ps1 without -SkipInstall first"
}

# -- 5. Tesseract OCR (optional) ------------------------------------------------------------------
if ($WithOcr) {
    Write-Step 'Installing Tesseract OCR with Korean and Chinese data'
    $programFiles = $env:ProgramW6432  # the 64-bit folder, even from a 32-bit PowerShell
    if (-not $programFiles) { $programFiles = $env:ProgramFiles }
    $tessDir = Join-Path $programFiles 'Tesseract-OCR'
    $tessExe = Join-Path $tessDir 'tesseract.exe'
    $tessData = Join-Path $tessDir 'tessdata'
    if (Test-Path -LiteralPath $tessExe) {
        Write-Info "already installed: $tessExe"
    } elseif ($null -eq (Get-Command winget -ErrorAction SilentlyContinue)) {
        Write-Warning2 ('winget is not available: install "App Installer" from the Microsoft Store, ' +
            'or Tesseract itself from https://github.com/UB-Mannheim/tesseract/wiki')
    } else {
        $wingetArgs = @('install', '--id', 'UB-Mannheim.TesseractOCR', '-e',
            '--accept-source-agreements', '--accept-package-agreements')
        $code = Invoke-Native 'winget' $wingetArgs
        if ($code -ne 0) {
            Write-Warning2 "winget could not install Tesseract (exit code $code)"
        } else {
            $script:Changed = $true
        }
    }
    if (Test-Path -LiteralPath $tessData) {
        $missing = @()
        foreach ($lang in @('kor', 'chi_sim')) {
            if (-not (Test-Path -LiteralPath (Join-Path $tessData "$lang.traineddata"))) { $missing += $lang }
        }
        if ($missing.Count -eq 0) {
            Write-Info "Tesseract has Korean and Chinese data: $tessData"
        } else {
            Write-Warning2 ("Tesseract lacks: $($missing -join ', '). Re-run its installer and tick " +
                '"Additional language data" (Korean, Chinese - Simplified), or run in a PowerShell ' +
                'opened as Administrator:')
            foreach ($lang in $missing) {
                Write-Host ("    Invoke-WebRequest -UseBasicParsing -Uri https://github.com/tesseract-ocr/tessdata_fast/raw/main/$lang.traineddata " +
                    "-OutFile '$(Join-Path $tessData "$lang.traineddata")'")
            }
        }
        Write-Info "Tesseract is not on PATH by itself; its folder: $tessDir"
    } elseif ($script:Changed) {
        Write-Warning2 "Tesseract was installed but $tessData is not there; check its install folder"
    }
}

# -- 6. Claude Desktop config (optional) ----------------------------------------------------------
if ($ConfigureClaude) {
    Write-Step "Adding linecite to Claude Desktop's config"
    $before = $null
    if (Test-Path -LiteralPath $ClaudeConfig) { $before = Get-Content -LiteralPath $ClaudeConfig -Raw }
    # The merge (backup, keep other servers, valid JSON) is Python's json, shared with install.sh.
    if ((Invoke-Native $VenvPy @($McpConfigPy, '--claude', $ClaudeConfig)) -ne 0) {
        Stop-Install "could not update $ClaudeConfig (see above)"
    }
    if ($before -ne (Get-Content -LiteralPath $ClaudeConfig -Raw)) { $script:Changed = $true }
}

# -- 7. the HTTP server in the background ---------------------------------------------------------
if ($BindHost.Contains(':')) {
    $Url = "http://[$($BindHost.Trim('[', ']'))]:$Port/mcp"
} else {
    $Url = "http://$($BindHost):$Port/mcp"
}
if (-not $NoLaunch) {
    Write-Step "Starting the linecite server on $Url"
    New-Item -ItemType Directory -Force -Path $LogDir | Out-Null
    $running = Get-ServerProcess
    if ($null -ne $running) {
        $cmdLine = Get-CommandLine $running.Id
        if ($cmdLine -and -not ($cmdLine.Contains("--host $BindHost --port $Port"))) {
            Stop-Install ("a linecite server is already running with other settings (PID $($running.Id): " +
                "$cmdLine). Stop it with: powershell -ExecutionPolicy Bypass -File .\install.ps1 -Stop " +
                '(or Stop-Process), then run again.')
        }
        Write-Info "already running (PID $($running.Id))"
    } elseif (Test-PortOpen) {
        Stop-Install "port $Port is in use by another program; choose another with -Port"
    } else {
        Remove-Item -LiteralPath $PidFile -Force -ErrorAction SilentlyContinue
        $loopback = ($BindHost -eq 'localhost') -or ($BindHost -eq '::1') -or $BindHost.StartsWith('127.')
        if (-not $loopback -and -not $env:LINECITE_HTTP_TOKEN) {
            Stop-Install ("binding $BindHost (not loopback) needs a token: set LINECITE_HTTP_TOKEN to a long " +
                "random string (clients send 'Authorization: Bearer <token>'), or use -BindHost 127.0.0.1")
        }
        # Start-Process truncates the log: keep the previous run's as server.log.old.
        if (Test-Path -LiteralPath $LogFile) {
            Move-Item -LiteralPath $LogFile -Destination "$LogFile.old" -Force -ErrorAction SilentlyContinue
        }
        # Windows PowerShell joins -ArgumentList without quoting: quote the path ourselves.
        $argLine = '"' + $ServerPy + '" --transport http --host ' + $BindHost + ' --port ' + $Port
        $proc = Start-Process -FilePath $VenvPy -ArgumentList $argLine -WorkingDirectory $Here `
            -WindowStyle Hidden -RedirectStandardOutput $OutFile -RedirectStandardError $LogFile -PassThru
        Set-Content -LiteralPath $PidFile -Value $proc.Id -Encoding Ascii
        $script:Changed = $true
        # Wait until it accepts connections; show the log's end if it dies first.
        $deadline = (Get-Date).AddSeconds(90)
        $up = $false
        while ((Get-Date) -lt $deadline) {
            if (Test-PortOpen) { $up = $true; break }
            if ($proc.HasExited) {
                Remove-Item -LiteralPath $PidFile -Force -ErrorAction SilentlyContinue
                Get-Content -LiteralPath $LogFile -Tail 30 | Out-Host
                Stop-Install "the server exited at start (log above: $LogFile)"
            }
            Start-Sleep -Milliseconds 300
        }
        if (-not $up) { Stop-Install "the server did not open port $Port within 90 s (log: $LogFile; PID $($proc.Id))" }
        Write-Info "started (PID $($proc.Id))"
    }
    Write-Info "log:  $LogFile"
    Write-Info "stop: Stop-Process -Id (Get-Content '$PidFile')"
    Write-Info '      (or: powershell -ExecutionPolicy Bypass -File .\install.ps1 -Stop)'
}

# -- 8. what to paste into an MCP host ------------------------------------------------------------
Write-Host ''
if (-not $NoLaunch) { Write-Host "linecite MCP endpoint (streamable HTTP): $Url" }
if ($ConfigureClaude) {
    Write-Host "Claude Desktop config: $ClaudeConfig"
} else {
    Write-Host "MCP host config (stdio), for claude_desktop_config.json or Cursor's mcp.json"
    Write-Host '(or run again with -ConfigureClaude to write it into Claude Desktop''s config):'
    $null = Invoke-Native $VenvPy @($McpConfigPy)
}
Write-Host ("Index documents: & '$VenvPy' '$(Join-Path $Here 'ingest.py')' " + '"$HOME\Documents\reports"')
if (-not $script:Changed) {
    Write-Host 'Nothing to do: everything was already in place.'
}
